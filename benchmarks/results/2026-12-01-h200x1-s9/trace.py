"""Session 9: eager spill-only top-p calls, traced. After every call (and with TRACE=1
after every kernel), each rank records its mailboxes' epochs and a hash of each box's
data; the ranks compare them (gloo)."""

from __future__ import annotations

import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.getcwd())
from tests.dist import run_ranks  # noqa: E402
from tests.gpu import SPILL_TOP_P, spill_logits  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")


def _snap(sampler):
    res = {}
    for words, mb in sorted(sampler._boxes._boxes.items()):
        ep = mb.epoch.tolist()
        d = mb.data.view(2, mb.capacity, mb.row_elems)
        hs = [hashlib.md5(d[p, :37].cpu().numpy().tobytes()).hexdigest()[:8] for p in (0, 1)]
        res[words] = (sorted(set(ep[:37])), ep[16], hs)
    return res


def _main(rank, world, calls, trace):
    import logits_gather.sampling as sampling
    from logits_gather.sampling import fused as fused_mod

    f = open(os.path.join(OUT, f"trace_rank{rank}.txt"), "w")

    def log(s):
        f.write(s + "\n")
        f.flush()

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    n, m = 4099, 37
    sampler = sampling.VocabParallelSampler(
        n, 64, device=dev, backend="symm_mem", check_values=False
    )
    if os.environ.get("S9_NO_BARRIER") == "1":
        sampler._fused.launch._barrier = None
    log(
        f"barrier {sampler._fused.launch._barrier is not None} "
        f"loading {os.environ.get('CUDA_MODULE_LOADING')}"
    )
    steps = []
    if trace:
        orig_local, orig_final = fused_mod.Fused._local, fused_mod.Fused._final

        def local(self, fn, *a, **k):
            mb = orig_local(self, fn, *a, **k)
            torch.cuda.synchronize()
            steps.append(f"{fn.__name__}(w={mb.words // world}) ep16={mb.epoch[16].item()}")
            return mb

        def final(self, fn, m_, mb, *a, **k):
            orig_final(self, fn, m_, mb, *a, **k)
            torch.cuda.synchronize()
            steps.append(f"{fn.__name__}(w={mb.words // world}) ep16={mb.epoch[16].item()}")

        fused_mod.Fused._local, fused_mod.Fused._final = local, final
    ones = torch.ones(m, device=dev)
    seeds = torch.arange(m, device=dev)
    spill = spill_logits(m, n, world, torch.bfloat16, dev)
    spilled = spill[:, rank * n : (rank + 1) * n].contiguous()
    from logits_gather.sampling import reference

    want = reference.sample(spill, ones, seeds, top_p=SPILL_TOP_P)
    for i in range(calls):
        steps.clear()
        t0 = time.perf_counter()
        out = sampler.sample(spilled, ones, seeds, top_p=SPILL_TOP_P)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        err = ""
        try:
            sampler.check()
        except Exception as exc:  # noqa: BLE001
            err = str(exc)[:120]
            for mb in sampler._boxes._boxes.values():
                mb.status.zero_()
        flags = sampler._fused.topp_flags.tolist()
        lam = sorted(set(sampler._fused.spilled.tolist()))
        mine = (flags, lam, bool(torch.equal(out, want)), _snap(sampler), err, list(steps), dt)
        every = [None] * world
        dist.all_gather_object(every, mine)
        if rank == 0:
            for r, (fl, la, ok, snap, e, st, d) in enumerate(every):
                log(f"call {i} rank {r} {d * 1e3:.1f} ms flags {fl} lam {la} ok {ok} err {e!r}")
                for w, s in snap.items():
                    log(f"   box {w}: epochs {s[0]} ep16 {s[1]} hash {s[2]}")
                for s in st:
                    log(f"   {s}")
    return "done"


if __name__ == "__main__":
    env = {
        "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1",
        "LOGITS_GATHER_SAMPLING_FUSED": "1",
        "LOGITS_GATHER_SAMPLING_FUSED_TOPK": "1",
    }
    try:
        print(
            run_ranks(
                _main, 2, int(sys.argv[1]), sys.argv[2] == "1", env=env, timeout=float(sys.argv[3])
            )
        )
    except AssertionError as exc:
        print(exc)
