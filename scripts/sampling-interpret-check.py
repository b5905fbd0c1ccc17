"""Logic check of the fused sampling kernels on the CPU with Triton's interpreter.

``TRITON_INTERPRET=1 PYTHONPATH=. python scripts/sampling-interpret-check.py`` runs
each rank's local kernel into its payload, stacks the payloads as the exchange
would, runs the final kernel, and compares with :mod:`.reference` on the full
logits (greedy and sample exactly; logprobs within 2e-5). CPU ``log`` is numpy's,
so this checks the logic, not the GPU's bits.
"""

from __future__ import annotations

import os
import random
import sys

import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from logits_gather.sampling import fused, kernels, reference  # noqa: E402


@triton.jit
def _log(x):
    return tl.log(x)


@triton.jit
def _exp(x):
    return tl.exp(x)


class _Libdevice:  # the interpreter has no libdevice: numpy's log/exp (logic only)
    log = _log
    exp = _exp


kernels.libdevice = _Libdevice


class FakeExchange:
    def __init__(self, width: int, m: int) -> None:
        self.width = width
        self.payload = torch.full((m, width), float("nan"))


def run(world: int, n: int, m: int, seed: int) -> int:
    gen = torch.Generator().manual_seed(seed)
    v = n * world
    full = torch.randn(m, v, generator=gen) * 3
    full[0] = torch.randint(-2, 2, (v,), generator=gen).float()  # ties
    if m > 1:
        full[1, [n - 1, n % v]] = 40.0
    if m > 2:
        full[2, 3] = float("nan")
    full = full.to(torch.bfloat16)
    temp = torch.rand(m, generator=gen) * 2
    temp[0] = 0.7
    if m > 3:
        temp[3] = 0.0
    seeds = torch.randint(-(2**62), 2**62, (m,), generator=gen)
    ids = torch.randint(0, v, (m,), generator=gen)
    fails = 0
    ops = [("greedy", None), ("sample", None)] + [("sample_k", k) for k in (1, 3, 20, 64)]
    ops += [("logprobs", n_) for n_ in (0, 1, 5)] + [("minp", mp) for mp in (0.05, 0.5, 1.0)]
    for op, arg in ops:
        fs = [fused.Fused(n, world, r) for r in range(world)]
        room = fs[0].room(arg) if op in ("sample_k", "logprobs") and arg else 0
        width = fs[0].width("sample" if op == "minp" else op, room)
        exs = [FakeExchange(width, m) for _ in range(world)]
        gxs = [FakeExchange(fs[0].width("greedy"), m) for _ in range(world)]

        def send(rows, exs=exs):
            return torch.stack([e.payload[:rows] for e in exs], 1).contiguous()

        def send_g(rows, exs=gxs):
            return torch.stack([e.payload[:rows] for e in exs], 1).contiguous()

        for e in exs:
            e.send = send
        for e in gxs:
            e.send = send_g
            e.twin = None
        for e, gx in zip(exs, gxs, strict=True):
            e.greedy = gx
        # Pass 1 fills every rank's payload, later passes read them all (deterministic);
        # min-p has two exchanges, so three passes.
        for _ in range(3):
            outs = [
                _call(f, op, arg, full[:, r * n : (r + 1) * n].contiguous(), temp, seeds, ids, e)
                for r, (f, e) in enumerate(zip(fs, exs, strict=True))
            ]
        for r, got in enumerate(outs):
            if op == "greedy":
                ok = torch.equal(got, full.argmax(1))
            elif op.startswith("sample") or op == "minp":
                f = dict(min_p=arg) if op == "minp" else dict(top_k=arg)
                want = reference.sample(full, temp, seeds, **f)
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
            print(f"world={world} n={n} m={m} {op} {arg} rank {r}: {'ok' if ok else 'FAIL'}")
            fails += not ok
    return fails


def _call(f, op, arg, shard, temp, seeds, ids, e):
    if op == "greedy":
        return f.greedy(shard, e)
    if op == "minp":
        logmp = torch.log(torch.full((shard.shape[0],), arg, dtype=torch.float32))
        return f.sample_minp(shard, temp, seeds, logmp, e.greedy, e)
    if op.startswith("sample"):
        return f.sample(shard, temp, seeds, arg, e)
    return f.logprobs(shard, ids, arg or 0, e)


def main() -> int:
    fails = 0
    for world, n, m in ((1, 300, 5), (2, 150, 6), (3, 100, 4), (2, 5000, 3)):
        fails += run(world, n, m, random.randrange(2**31))
    print("FAILURES:", fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
