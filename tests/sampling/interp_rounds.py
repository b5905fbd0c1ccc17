"""Top-p's round 2 skipped and run across a sequence of calls, in Triton's interpreter.

``TRITON_INTERPRET=1 PYTHONPATH=. python tests/sampling/interp_rounds.py`` (pytest:
``tests/sampling/test_interpreter.py``) runs two
ranks in threads (the harness of ``tests/sampling/interp.py``) through calls
that launch round 2 only when round 1 raised ``more``, mixed with calls that always run
it (``Fused.sample_topp``; the sampler runs it by ``M``), on rows round 1 decides, rows only
round 2 decides (``tests.support.gpu.spill_logits``) and rows neither decides. It checks every
decided token against :mod:`.reference`, ``need`` iff a row is undecided, and
``(need, more) = (False, True)`` on the round-2 rows: the mailboxes' epochs stay in step
whichever calls skip the round. Every rank's launcher runs the barrier that ranks
sharing a GPU use before a kernel variant's first launch (``fused.launcher.Launcher``), so the
ranks must make the same barrier calls (a mismatch breaks the barrier and fails the
run). Exit status 1 on a failure.
"""

from __future__ import annotations

import runpy
import sys
import threading
from pathlib import Path

import torch

from logits_gather.sampling import reference
from logits_gather.sampling.fused import fused
from scripts.support.emulated import Box
from tests.support.gpu import SPILL_TOP_P, spill_logits

CPU = torch.device("cpu")
WORLD, N, M = 2, 4099, 5


def _ranks(launch_lock: threading.Lock) -> list[fused.Fused]:
    lock, boxes = threading.Lock(), {}

    def box_for(rank: int):
        def box(words: int, rows: int, capacity: int | None = None) -> Box:
            with lock:
                if words not in boxes:
                    made = [Box(words * WORLD, 8, CPU, 1.0) for _ in range(WORLD)]
                    table = torch.tensor([b.data.data_ptr() for b in made], dtype=torch.int64)
                    for b in made:
                        b.peers = table
                    boxes[words] = made
                return boxes[words][rank]

        return box

    barrier = threading.Barrier(WORLD)
    fs = [fused.Fused(N, WORLD, r, box_for(r), False, 2) for r in range(WORLD)]
    for f in fs:
        real = f.final

        def deferred(*args, real=real):
            barrier.wait()  # every rank's local kernels have run
            real(*args)
            barrier.wait()

        f.final = deferred
    launches = threading.Barrier(WORLD, timeout=300)  # the shared-GPU launch barrier:

    def meet() -> None:  # every rank must make the same barrier calls, skipped rounds or not
        launch_lock.release()  # held by this rank's launch (the harness runs one at a time)
        try:
            launches.wait()
        finally:
            launch_lock.acquire()

    for f in fs:
        f.launch._barrier = meet
    return fs


def _call(f: fused.Fused, always: bool, shard, t, rows, p) -> tuple[torch.Tensor, list]:
    if always:
        out, need = f.sample_topp(shard, t, rows, p, None, exact=False)
        return out, [bool(need), None]
    out, flags, second, _ = f.topp_rounds(shard, t, rows, p, None)
    if bool(flags[1]):
        second()
    return out, flags.tolist()


def main() -> int:
    lib = runpy.run_path(str(Path(__file__).with_name("interp.py")), run_name="lib")
    fs, fails = _ranks(lib["_LOCK"]), 0
    gen = torch.Generator().manual_seed(5)
    spill, ones = spill_logits(M, N, WORLD, torch.bfloat16, CPU), torch.ones(M)
    for it in range(3):
        rnd = (torch.randn(M, N * WORLD, generator=gen) * 3).to(torch.bfloat16)
        dense = rnd.clone()
        dense[:, :70], dense[:, 2048:2100] = 12.0, 11.9  # neither round decides these
        temp = torch.rand(M, generator=gen) + 0.3
        seeds = torch.randint(-(2**62), 2**62, (M,), generator=gen)
        pos = torch.randint(0, 2**31, (M,), generator=gen)
        rows = (seeds, pos)  # the fused kernels' seeds, positions
        calls = [
            (False, rnd, temp, 0.9),
            (False, dense, temp, 0.5),
            (False, spill, ones, SPILL_TOP_P),
            (True, dense, temp, 0.7),
            (False, rnd, temp, 0.3),
            (True, spill, ones, SPILL_TOP_P),
        ]
        for always, full, t, p in calls:
            pv = torch.full((M,), p, dtype=torch.float64)
            res: list = [None] * WORLD

            def one(r, always=always, full=full, t=t, pv=pv, res=res, rows=rows):
                shard = full[:, r * N : (r + 1) * N].contiguous()
                res[r] = _call(fs[r], always, shard, t, rows, pv)

            threads = [threading.Thread(target=one, args=(r,)) for r in range(WORLD)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            want = reference.sample(full, t, seeds, pos, top_p=pv)
            for r, (out, flags) in enumerate(res):
                decided = out >= 0
                ok = torch.equal(out[decided], want[decided])
                ok = ok and flags[0] == bool((~decided).any())
                if full is spill:
                    ok = ok and flags[0] is False and flags[1] in (True, None)
                fails += not ok
                kind = "both rounds" if always else "round 2 if more"
                print(f"call set {it}, {kind}, top_p={p}, rank {r}: (need, more) {flags}, "
                      f"{int(decided.sum())} of {M} decided: {'ok' if ok else 'FAIL'}")  # fmt: skip
    print("FAILURES:", fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
