"""Logic check of the fused sampling kernels on the CPU with Triton's interpreter.

``TRITON_INTERPRET=1 PYTHONPATH=. python tests/sampling/interp.py [--smoke|--single|--adversarial]
[--tp8]`` (pytest: ``tests/sampling/test_interpreter.py``) runs
every rank in a thread of one process, with CPU mailboxes whose peer tables hold
all ranks' addresses; kernels run one at a time, and each final kernel starts
once every rank's local kernels ran. It compares with :mod:`.reference` on the
full logits (greedy and sample exactly; logprobs within 2e-5; top-p: every row the
candidates decide equals the definition, and the flag is set iff a row is undecided;
top-k with min-p and top-p, exactly).
CPU ``log``/``exp`` are numpy's, so this checks the logic, not the GPU's bits.
"""

from __future__ import annotations

import os
import random
import sys

import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"

import threading  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from logits_gather.sampling import reference  # noqa: E402
from logits_gather.sampling.fused import fused, launcher, plans  # noqa: E402
from logits_gather.sampling.kernels import keys, radix, waiters, writers  # noqa: E402
from scripts.support.emulated import Box  # noqa: E402

CPU = torch.device("cpu")


# The interpreter has no libdevice: tl.math's log, exp, floor and ceil are numpy's there
# (so this checks the logic, not the GPU's bits).
_Libdevice = tl.math
waiters.libdevice = radix.libdevice = writers.libdevice = _Libdevice
_LOCK = threading.Lock()
_launch = launcher.Launcher.__call__


def _locked(self, *args):
    with _LOCK:
        _launch(self, *args)


launcher.Launcher.__call__ = _locked


def _mailboxes(world: int, capacity: int):
    """``(box_for, boxes)``: ``box_for(rank)`` is a rank's ``box(words, rows)`` for
    :class:`~logits_gather.sampling.fused.fused.Fused`, CPU mailboxes built for every rank
    at once (``boxes[words]``) with peer tables of all ranks' addresses."""
    boxes: dict[int, list[Box]] = {}

    def made_for(words: int) -> list[Box]:
        if words not in boxes:
            made = [Box(words * world, capacity, CPU, 1.0) for _ in range(world)]
            table = torch.tensor([b.data.data_ptr() for b in made], dtype=torch.int64)
            for b in made:
                b.peers = table
            boxes[words] = made
        return boxes[words]

    def box_for(rank: int):
        def box(words: int, rows: int, capacity: int | None = None) -> Box:
            with _LOCK:
                return made_for(words)[rank]

        return box

    return box_for, boxes


def _logits(gen: torch.Generator, world: int, n: int, m: int, dtype) -> tuple:
    """``(full, temperature)``: the adversarial rows :func:`run` checks by default."""
    v = n * world
    full = torch.randn(m, v, generator=gen) * 3
    full[0] = torch.randint(-2, 2, (v,), generator=gen).float()  # ties
    if m > 1:
        full[1, [n - 1, n % v]] = 40.0
    if m > 2:
        full[2, 3] = float("nan")
    if m > 4:  # few distinct values: top-k cuts inside long runs
        full[4] = torch.randint(-4, 4, (v,), generator=gen).float() * 3
    if m > 5:  # one dominant logit and a long equal tail
        full[5] = -2.0
        full[5, (7919 * 5) % v] = 6.0
    for i in range(6, m):  # one large value per 8 columns: on narrow shards fewer
        full[i] = torch.rand(v, generator=gen) - 5.0  # column groups than k hold one
        full[i, ::8] += 15.0
    if m > 7 and n >= 4096:  # one dense split hides round 1's cut: round 2 decides it
        full[7] = -20.0
        full[7, :70] = 10.0 - 0.49 * torch.arange(70) / 70
        for start in range(2048, v, 2048):
            full[7, start : start + 60] = 9.95
    full = full.to(dtype)
    temp = torch.rand(m, generator=gen) * 2
    temp[0] = 0.7
    if m > 3:
        temp[3] = 0.0
    temp[6:] = 50.0  # nearly uniform over the kept set: a missing element shows
    if m > 7:
        temp[7] = 1.0
    return full, temp


def _ops(m: int, v: int) -> list:
    """Every operation :func:`run` checks by default, ``(op, argument)``."""
    ops: list = [("greedy", None), ("sample", None)] + [("sample_k", k) for k in (1, 3, 20, 64)]
    ops += [("logprobs", n_) for n_ in (0, 1, 5)] + [("minp", mp) for mp in (0.05, 0.5, 1.0)]
    mixed = torch.tensor([(0.9, 1.0, 0.3, 0.999)[i % 4] for i in range(m)], dtype=torch.float64)
    ops += [("topp", (0.9, None)), ("topp", (0.5, 0.1)), ("topp", (mixed, None))]
    ops += [("topp", (0.95, 0.01)), ("topp", (mixed.float(), None))]  # float32: vLLM's
    ops += [("topk_f", (20, 0.9, None)), ("topk_f", (3, 0.5, None)), ("topk_f", (64, mixed, None))]
    ops += [("topk_f", (50, 0.9, 0.05)), ("topk_f", (20, None, 0.1)), ("topk_f", (1, 0.3, None))]
    rowk = torch.tensor([(1, 5, 64, 20, 3)[i % 5] for i in range(m)], dtype=torch.int64)
    ops += [("topk_f", (rowk, None, None)), ("topk_f", (rowk, mixed, 0.05))]
    ops += [("topk_f", (20, mixed.float(), None))]
    # Per-row k with rows off (0, >= V) in top-k's launches (topk.rowk_local), and rows beyond
    # the candidates (64 < k < V: -1, then at world size 1 the in-kernel fallback's tokens).
    off = torch.tensor([(0, 5, v, 64, 1, v + 3, 0, 20)[i % 8] for i in range(m)], dtype=torch.int64)
    far = off.clone()
    far[m // 2] = min(65, v - 1)
    ops += [("rowk", (off, None)), ("rowk", (off, 0.05)), ("rowk", (far, None))]
    # Per-row k with top-p in top-p's launches (nucleus_k_row): any k, decided from candidates
    pk = torch.tensor([(5, 0, 64, v, 1, 300, 0, 20, 65)[i % 9] for i in range(m)])
    ops += [("rowkp", (pk, mixed, None)), ("rowkp", (pk, mixed, 0.05)), ("rowkp", (pk, 0.9, None))]
    return ops


def run(
    world: int,
    n: int,
    m: int,
    seed: int,
    dtype=torch.bfloat16,
    single: bool = False,
    data: tuple[torch.Tensor, torch.Tensor] | None = None,
    ops: list | None = None,
) -> int:
    """``single``: one launch per round (``*_one`` kernels: greedy,
    sample, logprobs, min-p, top-k; world 1 only: here a waiting program cannot wait for
    a kernel that runs after its own). ``data``: ``(full [m, n * world], temperature)``
    instead of :func:`_logits`'s; ``ops``: these operations instead of :func:`_ops`'s."""
    gen = torch.Generator().manual_seed(seed)
    v = n * world
    full, temp = data if data is not None else _logits(gen, world, n, m, dtype)
    seeds = torch.randint(-(2**62), 2**62, (m,), generator=gen)
    pos = torch.randint(0, 2**31, (m,), generator=gen)
    rows = (seeds, pos)  # the fused kernels' seeds, positions
    ids = torch.randint(0, v, (m,), generator=gen)
    fails = 0
    ops = _ops(m, v) if ops is None else ops
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)
    ops = [op for op in ops if only is None or op[0] in only]
    undecided = spilled = rescued = k_rows = k_decided = rested = 0
    box_for, boxes = _mailboxes(world, max(8, m))
    barrier = threading.Barrier(world)
    one = m if single else 0
    fs = [fused.Fused(n, world, r, box_for(r), False, 2, single_rows=one) for r in range(world)]
    for f in fs:
        real = f.final

        def deferred(*args, real=real):
            barrier.wait()  # every rank's local kernel has run
            with _LOCK:
                pass
            real(*args)
            barrier.wait()

        f.final = deferred
    launched: set[str] = set()  # the one-launch kernels that ran
    for f in fs:
        real_one = f.one

        def counted(fn, *args, real_one=real_one, **kw):
            launched.add(fn.__name__)
            return real_one(fn, *args, **kw)

        f.one = counted
    for op, arg in ops:
        for _ in range(2):  # twice: the second call uses the other parity and epoch 2
            outs = [None] * world

            def one(r, op=op, arg=arg, outs=outs):
                shard = full[:, r * n : (r + 1) * n].contiguous()
                outs[r] = _call(fs[r], op, arg, shard, temp, rows, ids)

            threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        for r, got in enumerate(outs):
            if op == "greedy":
                ok = torch.equal(got, full.argmax(1))
            elif op == "topp" and world == 1:  # the in-kernel fallback served the rest
                got, left = got
                want = reference.sample(full, temp, seeds, pos, top_p=arg[0], min_p=arg[1])
                ok = torch.equal(got, want)
                rested += left
            elif op == "topp":
                got, need = got
                want = reference.sample(full, temp, seeds, pos, top_p=arg[0], min_p=arg[1])
                decided = got >= 0
                ok = torch.equal(got[decided], want[decided]) and bool(need) == bool(
                    (~decided).any()
                )
                undecided += int((~decided).sum())
                again = fs[r].spilled != 0x7FFFFFFF
                spilled += int(again.sum())
                rescued += int((again & decided).sum())
                if not ok:
                    print(op, "got", got.tolist(), "want", want.tolist())
            elif op == "topk_f":
                k, p, mp = arg
                want = reference.sample(full, temp, seeds, pos, top_k=k, top_p=p, min_p=mp)
                ok = torch.equal(got, want)
                if not ok:
                    print(op, "got", got.tolist(), "want", want.tolist())
            elif op == "rowk":
                k, mp = arg
                # Rows the kernels decide alone: T=0, or a row maximum that is not finite.
                alone = (temp == 0) | ~torch.isfinite(full.float().amax(1))
                served = (k <= 64) | (k >= v) | (world == 1) | alone
                want = reference.sample(
                    full, temp, seeds, pos, top_k=torch.where(k >= v, 0, k), min_p=mp
                )
                ok = torch.equal(got[served], want[served]) and bool((got[~served] == -1).all())
                rested += int((~((k <= 64) | (k >= v) | alone)).sum()) if world == 1 else 0
                if not ok:
                    print(op, "got", got.tolist(), "want", want.tolist())
            elif op == "rowkp" and world == 1:
                got, left = got
                k, p, mp = arg
                want = reference.sample(full, temp, seeds, pos, top_k=k, top_p=p, min_p=mp)
                ok = torch.equal(got, want)
                rested += left
                if not ok:
                    print(op, "got", got.tolist(), "want", want.tolist())
            elif op == "rowkp":
                got, need = got
                k, p, mp = arg
                want = reference.sample(full, temp, seeds, pos, top_k=k, top_p=p, min_p=mp)
                decided = got >= 0
                ok = torch.equal(got[decided], want[decided]) and bool(need) == bool(
                    (~decided).any()
                )
                on = (k > 0) & (k < v)
                k_rows, k_decided = k_rows + int(on.sum()), k_decided + int((on & decided).sum())
                if not ok:
                    print(op, "got", got.tolist(), "want", want.tolist(), "need", bool(need))
            elif op.startswith("sample") or op == "minp":
                f = dict(min_p=arg) if op == "minp" else dict(top_k=arg)
                want = reference.sample(full, temp, seeds, pos, **f)
                ok = torch.equal(got, want)
                if not ok:
                    print(op, arg, "got", got.tolist(), "want", want.tolist())
            else:
                want = reference.logprobs(full, ids, arg or 0)
                lp, tid, tlp = got
                ok = bool(
                    ((lp - want.logprobs).abs() <= 2e-5 * (1 + want.logprobs.abs()))[
                        ~want.logprobs.isnan()
                    ].all()
                ) and torch.equal(tid, want.top_ids)
                if not ok:
                    print(lp, want.logprobs, tid, want.top_ids)
            mix = isinstance(arg, tuple) and any(isinstance(a, torch.Tensor) for a in arg)
            tag = "mixed" if mix else arg
            how = " (one launch)" if single else ""
            print(f"world={world} n={n} m={m} {op} {tag}{how} rank {r}: {'ok' if ok else 'FAIL'}")
            fails += not ok
    print(
        f"top-p rows left to round 2: {spilled}, of which it decided {rescued}; "
        f"undecided (fallback): {undecided}"
    )
    if rested:
        print(f"rows the in-kernel fallback served: {rested}")
    if k_rows:
        print(f"per-row top-k with top-p: {k_decided} of {k_rows} rows with k on decided")
    if single:
        print("one-launch kernels run:", ", ".join(sorted(launched)) or "none")
        busy = [w for w, made in boxes.items() for b in made if b.arrivals.any()]
        if busy:  # arrival counts are back to 0 after every call
            print(f"FAIL: arrivals left nonzero in the {sorted(set(busy))}-word mailboxes")
            fails += 1
    if rescued == 0 and world == 3 and m > 7 and any(op[0] == "topp" for op in ops):
        print("FAIL: round 2 decided no row of the dense-split case")
        fails += 1
    return fails


def _rested(f, rounds):
    """World size 1: ``(tokens, rows left to the in-kernel fallback)`` of top-p's
    rounds, round 2 included, then that fallback (a program of the interpreter can wait
    only for words already written: its own rank's, one member per team)."""
    out, _, second, rest = rounds()
    second()
    left = int((out < 0).sum())
    rest()
    return out, left


def _call(f, op, arg, shard, temp, seeds, ids):
    if op == "greedy":
        return f.greedy(shard)
    if op == "minp":
        mp = torch.full((shard.shape[0],), arg, dtype=torch.float32)
        return f.sample_minp(shard, temp, seeds, mp)
    if op == "topp":
        p, mp = arg
        m = shard.shape[0]
        p = p if isinstance(p, torch.Tensor) else torch.full((m,), p, dtype=torch.float64)
        mp = None if mp is None else torch.full((m,), mp, dtype=torch.float32)
        if f.world == 1:  # every row final: (tokens, rows the fallback served)
            return _rested(f, lambda: f.topp_rounds(shard, temp, seeds, p, mp))
        return f.sample_topp(shard, temp, seeds, p, mp, exact=False)
    if op == "topk_f":
        k, p, mp = arg
        m = shard.shape[0]
        if p is not None and not isinstance(p, torch.Tensor):
            p = torch.full((m,), p, dtype=torch.float64)
        mp = None if mp is None else torch.full((m,), mp, dtype=torch.float32)
        return f.sample_topk(shard, temp, seeds, k, p, mp)
    if op == "rowk":
        k, mp = arg
        m = shard.shape[0]
        mp = None if mp is None else torch.full((m,), mp, dtype=torch.float32)
        return f.sample_topk(shard, temp, seeds, k, None, mp, plain=True, exact=f.world == 1)
    if op == "rowkp":
        k, p, mp = arg
        m = shard.shape[0]
        p = p if isinstance(p, torch.Tensor) else torch.full((m,), p, dtype=torch.float64)
        mp = None if mp is None else torch.full((m,), mp, dtype=torch.float32)
        if f.world == 1:
            return _rested(f, lambda: f.topp_rounds(shard, temp, seeds, p, mp, k))
        out, flags, second, _ = f.topp_rounds(shard, temp, seeds, p, mp, k)
        second()  # always: the caller's flags may skip it
        return out, flags[:1]
    if op.startswith("sample"):
        if arg is not None:
            return f.sample_topk(shard, temp, seeds, arg, None, None)
        return f.sample(shard, temp, seeds)
    return f.logprobs(shard, ids, arg or 0)


@triton.jit
def _decode_kernel(cand_ptr, t, u_ptr, nbytes_ptr, N: tl.constexpr, XBITS: tl.constexpr):
    i = tl.arange(0, N)
    cand = tl.load(cand_ptr + i)
    _, _, u, nbytes = radix.decode_keys(cand, t, cand != keys.KEY_MIN, XBITS)
    tl.store(u_ptr + i, u)
    tl.store(nbytes_ptr, nbytes)


def check_decode() -> int:
    """The waiters' short radix keys (:func:`.radix.decode_keys`): bfloat16 x / T (the
    definition's scores, :func:`.reference.scaled`) gives 16-bit keys ordered like s (2 bytes);
    s values that are no x / T fall back to 4."""
    fails = 0
    t = 0.7
    for kind in ("x / T", "arbitrary s"):
        if kind == "x / T":
            x = (torch.randn(64) * 4).to(torch.bfloat16).float()
            x[:8] = x[8]  # ties
            s = reference.scaled(x[None], torch.tensor([t]))[0]
        else:
            s = torch.randn(64) * 4
        h = s.view(torch.int32).to(torch.int64)
        h = torch.where(s == 0, 0, torch.where(h < 0, h ^ 0x7FFFFFFF, h))
        cand = (h << 32) | (0xFFFFFFFF - torch.arange(64))
        u, nbytes = torch.empty(64, dtype=torch.int64), torch.empty(1, dtype=torch.int32)
        _decode_kernel[(1,)](cand, t, u, nbytes, 64, 16)
        order = torch.sign(s[:, None] - s[None, :]) == torch.sign(u[:, None] - u[None, :])
        ok = bool(order.all()) and int(nbytes) == (2 if kind == "x / T" else 4)
        if kind == "x / T":
            ok = ok and int(u.max()) < 1 << 16
        print(f"decode_keys, {kind}: bytes {int(nbytes)}, order kept {bool(order.all())}: "
              f"{'ok' if ok else 'FAIL'}")  # fmt: skip
        fails += not ok
    return fails


def check_dead() -> int:
    """Top-p's in-kernel fallback serves the rows its rounds left, and none once the
    sampler's device flag says a wait timed out (:func:`..kernels.topp_exact._alive`): those rows
    then keep -1. World size 1, flat rows that 64 candidate slots cannot decide."""
    gen = torch.Generator().manual_seed(11)
    m, n = 4, 300
    box_for, boxes = _mailboxes(1, 8)
    f = fused.Fused(n, 1, 0, box_for(0), False, 2)
    shard = (torch.randn(m, n, generator=gen) * 0.5).to(torch.bfloat16)
    temp, p = torch.ones(m), torch.full((m,), 0.9, dtype=torch.float64)
    rows = (torch.arange(m), torch.zeros(m, dtype=torch.int64))  # seeds, positions
    fails = 0
    for dead in (0, 1):
        out, _, second, rest = f.topp_rounds(shard, temp, rows, p, None)
        second()
        left = out < 0
        for (b,) in boxes.values():
            b.dead.fill_(dead)
        rest()
        served = int((out[left] >= 0).sum())
        ok = bool(left.any()) and served == (0 if dead else int(left.sum()))
        print(f"fallback, dead flag {dead}: {int(left.sum())} rows left to it, {served} "
              f"served: {'ok' if ok else 'FAIL'}")  # fmt: skip
        fails += not ok
    return fails


def adversarial() -> int:
    """Issue 67's rows (:func:`tests.sampling.test_exactness.base_rows`: ties at the cuts
    across shard boundaries, flat and nearly flat rows, rows kept whole, one token holding
    the mass, float32 keys one ulp apart, and the ties row at T = 0) through top-p (0.9 and
    per-row cuts at a run's end or one unit of mass past it), top-k with top-p, top-k and a
    per-row top-k with min-p at V = 768: at world size 1 every row (the in-kernel fallback
    serves what the rounds leave), in bfloat16 (float32: the per-row cuts and top-k); at
    tp 2 (bfloat16) top-k exactly and the top-p rows the candidates decide. About a minute
    on a CPU core."""
    from tests.sampling import test_exactness as ex

    base = ex.base_rows(torch.Generator().manual_seed(ex.SEED))
    kinds = ex.KINDS + ("ties",)
    temp = torch.tensor([ex.TEMPS.get(k, 1.0) for k in kinds])
    temp[-1] = 0.0
    m, v = len(kinds), ex.V
    k_rows = torch.tensor([(0, 9, 10, 11, 65, v, 300, 1)[i % 8] for i in range(m)])
    fails = 0
    for world, dtype in ((1, torch.bfloat16), (1, torch.float32), (2, torch.bfloat16)):
        full = torch.stack([base[k] for k in kinds]).to(dtype)
        at = ex.run_end_p(full, temp, 0, deep=False)
        past = ex.run_end_p(full, temp, 1, deep=True)
        ops = [("topp", (at, None)), ("topk_f", (11, past, None)), ("topk_f", (10, None, None))]
        if world == 1 and dtype == torch.bfloat16:
            ops += [("topp", (0.9, None)), ("rowk", (k_rows, 0.05))]
        print(f"adversarial rows, {dtype}:", flush=True)
        fails += run(world, v // world, m, ex.SEED, dtype, data=(full, temp), ops=ops)
    return fails


def _report(fails: int) -> int:
    print("FAILURES:", fails)
    return 1 if fails else 0


def main() -> int:
    """``--adversarial``: :func:`adversarial` alone.
    ``--tp8``: also every operation at tp=8's geometry (8 x 18944 columns; minutes).
    ``--only=OP[,OP]``: those operations alone (greedy, sample, sample_k, logprobs, minp,
    topp, topk_f, rowk, rowkp). ``--single``: the world-1 one-launch runs alone.
    ``--smoke``: the whole run's first part alone: the key decoding, the fallback's dead
    flag and every operation on the narrowest shards (one launch at world size 1, then
    tp 2 and 3); about 3 minutes on one CPU core, where the whole run takes over 25
    minutes."""
    if "--adversarial" in sys.argv:
        return _report(adversarial())
    if "--single" in sys.argv:
        fails = run(1, 300, 5, random.randrange(2**31), torch.bfloat16, single=True)
        fails += run(1, 9000, 6, random.randrange(2**31), torch.bfloat16, single=True)
        return _report(fails)
    fails = check_decode() + check_dead()
    fails += run(1, 300, 5, random.randrange(2**31), torch.bfloat16, single=True)
    for world, n, m in ((2, 150, 16), (3, 100, 4)):
        fails += run(world, n, m, random.randrange(2**31), torch.bfloat16)
    if "--smoke" in sys.argv:
        return _report(fails)
    if "--tp8" in sys.argv:
        fails += run(8, 18944, 8, random.randrange(2**31))
    for world, n, m, dtype in (
        (1, 300, 5, torch.bfloat16),
        (2, 5000, 3, torch.bfloat16),
        (2, 5000, 6, torch.float32),
        (2, 9000, 6, torch.float16),
        (3, 5000, 8, torch.bfloat16),
    ):
        fails += run(world, n, m, random.randrange(2**31), dtype)
    fails += run(1, 9000, 6, random.randrange(2**31), torch.float16, single=True)
    # One program per row for the idle writers (topk_overflow, again_local), so each
    # serves several splits in turn, as at M > 32 on GPUs: row 7 reaches top-p's round
    # 2 and rows 0 and 4 overflow top-k's slots.
    names = ("IDLE_LEAST", "IDLE_PROGRAMS", "OVERFLOW_LEAST", "OVERFLOW_PROGRAMS")
    saved = [getattr(plans, name) for name in names]
    for name in names:
        setattr(plans, name, 1)
    try:
        fails += run(3, 5000, 8, random.randrange(2**31), torch.bfloat16)
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(plans, name, value)
    return _report(fails)


if __name__ == "__main__":
    sys.exit(main())
