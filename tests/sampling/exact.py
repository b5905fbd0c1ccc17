"""Exactness of the fused top-p and top-k kernels on adversarial rows, one GPU, one rank
(top-k also with a per-row k whose rows turn it off, with and without min-p; a per-row
k with top-p).

``PYTHONPATH=. python tests/sampling/exact.py [--dtype=NAME]`` (pytest:
``tests/sampling/test_exact.py``) runs, for bfloat16, float16 and
float32, 16 calls each of top-p, top-k with top-p and min-p, top-k alone, a per-row
k, and a per-row k with top-p (min-p on odd trials), at M=64 over 75776 columns (tp=2's
per-rank width), on fresh random rows: plain, runs of ties, a split of equal values at
the top, greedy rows (T=0), rows with top-p off, rows whose ``s`` is subnormal, and
rows spread past a subnormal min-p's threshold (or with min-p 0). It prints how many
tokens differ from :mod:`.reference` (every row: the rounds, then the in-kernel exact
fallback), how many top-p rows reached the second round, and how many the rounds left to
that fallback. Exit status 1 on a wrong token.
"""

from __future__ import annotations

import sys

import torch

from logits_gather.sampling import reference
from scripts.support.emulated import Ranks

N, M = 75776, 64


def rows(gen: torch.Generator, dt: torch.dtype, trial: int, dev: torch.device):
    """``(x, t, (seed, position), p, min_p, k)`` of one call."""
    scale = (1.0, 3.0, 8.0)[trial % 3]
    x = torch.randn(M, N, device=dev, generator=gen) * scale
    x[::4] = torch.randint(-3, 3, (M // 4, N), device=dev, generator=gen).float() * 2  # ties
    x[1::8, :4000] = x[1::8, :4000].max() + 1  # a split of equal values at the top
    x = x.to(dt)
    t = torch.rand(M, device=dev, generator=gen) + 0.3
    t[::7] = 0.0
    if trial % 4 == 3:  # s subnormal in fp32
        x[2::4] = (torch.randn(M // 4, N, device=dev, generator=gen) * 1e-36).to(dt)
        t[2::4] = 60.0
    seed = torch.randint(0, 1 << 40, (M,), device=dev, generator=gen)
    p = torch.rand(M, device=dev, generator=gen, dtype=torch.float64) * 0.98 + 0.01
    p[::9] = 1.0
    mp = torch.rand(M, device=dev, generator=gen) * 0.2
    mp[6::16] = 0.0  # min-p off in those rows
    # Subnormal min-p (a threshold of -87 to -103) on rows spread wide enough to reach it.
    sub = torch.randint(1, 1 << 23, (M // 16,), device=dev, generator=gen, dtype=torch.int32)
    mp[5::16] = sub.view(torch.float32)
    x[5::16] = (torch.randn(M // 16, N, device=dev, generator=gen) * 40).to(dt)
    t[5::16] = 1.0
    k = int(torch.randint(1, 65, (1,), device=dev, generator=gen))
    pos = torch.randint(0, 1 << 31, (M,), device=dev, generator=gen)
    return x, t, (seed, pos), p, mp, k


DTYPES = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--dtype=")] or [
    "bfloat16", "float16", "float32"]  # fmt: skip
"""``--dtype=NAME`` (repeatable): those dtypes alone (each costs its compiles)."""


def _rounds_then_rest(f, x, t, sp, p, mp, k) -> tuple[torch.Tensor, int]:
    """Top-p's rounds (round 2 always), then the in-kernel fallback: ``(tokens, rows the
    rounds left to it)``."""
    tok, _, second, rest = f.topp_rounds(x, t, sp, p, mp, k)
    second()
    left = int((tok < 0).sum())
    rest()
    return tok, left


def main() -> int:
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(6)
    wrong_total = 0
    for dt in (getattr(torch, name) for name in DTYPES):
        f = Ranks(1, N, M, dev, wait_ctas=0).fused[0]
        wrong = undecided = second = calls = k_rows = k_undecided = 0
        for trial in range(16):
            x, t, (seed, pos), p, mp, k = rows(gen, dt, trial, dev)
            sp = (seed, pos)  # the fused kernels' seeds, positions
            tok, left = _rounds_then_rest(f, x, t, sp, p, None, None)
            wrong += int((tok != reference.sample(x, t, seed, pos, top_p=p)).sum())
            undecided += left
            second += int((f.spilled != 0x7FFFFFFF).sum())
            tok = f.sample_topk(x, t, sp, k, p, mp)
            wrong += int(
                (tok != reference.sample(x, t, seed, pos, top_k=k, top_p=p, min_p=mp)).sum()
            )
            tok = f.sample_topk(x, t, sp, k, None, None)
            wrong += int((tok != reference.sample(x, t, seed, pos, top_k=k)).sum())
            # A per-row k whose rows turn top-k off (0 or V) or pass 64 (the in-kernel fallback)
            # in top-k's launches (topk.rowk_local), with min-p on odd trials.
            pick = torch.randint(0, 6, (M,), device=dev, generator=gen)
            kr = torch.tensor([0, 1, k, 64, N, 300], device=dev)[pick]
            mpr = mp if trial % 2 else None
            tok = f.sample_topk(x, t, sp, kr, None, mpr, plain=True)
            want = reference.sample(x, t, seed, pos, top_k=torch.where(kr >= N, 0, kr), min_p=mpr)
            wrong += int((tok != want).sum())
            pick2 = torch.randint(0, 7, (M,), device=dev, generator=gen)
            # A per-row k (any value) with top-p, then without (top_p 1: the sampler's
            # route for a per-row k), in top-p's launches (nucleus_k_row, then the rest).
            kr = torch.tensor([0, 1, k, 64, N, 300, 5000], device=dev)[pick2]
            on = (kr > 0) & (kr < N)
            for pr in (p, torch.ones_like(p)):
                tok, left = _rounds_then_rest(f, x, t, sp, pr, mpr, kr)
                want = reference.sample(x, t, seed, pos, top_k=kr, top_p=pr, min_p=mpr)
                wrong += int((tok != want).sum())
                k_undecided += left
                k_rows += int(on.sum())
            calls += 6
        print(
            f"{dt}: {calls} calls x {M} rows, wrong {wrong}, "
            f"top-p rows to round 2 {second}, "
            f"left to the in-kernel fallback {undecided}; per-row k (with top-p, then "
            f"without): {k_undecided} rows left to it, of {k_rows} with k on",
            flush=True,
        )
        wrong_total += wrong
    return 1 if wrong_total else 0


if __name__ == "__main__":
    sys.exit(main())
