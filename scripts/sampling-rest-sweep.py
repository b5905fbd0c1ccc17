"""Team geometry of top-p's in-kernel exact fallback
(:mod:`logits_gather.sampling.kernels.topp_exact`), on one GPU, one process, no peers.

``python scripts/sampling-rest-sweep.py [--columns 151552] [--rows 1,4,16,64,256]``

A one-rank sampler (``scripts.support.emulated.Ranks``) over ``columns`` columns of
``randn * 3`` bfloat16 rows. For each rule of the fallback's team (``old``: at most 16
members of 8192 columns or more, whatever M; ``new``: :func:`plans.rest_team`, wider teams
where the rows leave the grid idle) it prints microseconds per call under
CUDA-graph replay of ``top_p=0.9`` on ``flat`` rows (T uniform in [1, 1.5], the rows the
candidate rounds leave undecided) and on ``t08`` rows (T = 0.8, decided by the
candidates), of a per-row ``top_k=1000`` (no top_p) on flat rows, and of top-p's round 1
alone on flat rows. Tokens of every variant must equal the first one's (one definition):
the script says how many differ. No NVLink: add the exchange's latency.
"""

from __future__ import annotations

import argparse

import torch

from logits_gather.sampling.fused import fused
from scripts.support.emulated import Ranks
from scripts.support.replay import graph_us


def _inputs(m: int, columns: int, device: torch.device, flat: bool):
    g = torch.Generator(device="cpu").manual_seed(1234 + m)
    x = (torch.randn(m, columns, generator=g) * 3).to(torch.bfloat16).to(device)
    if flat:
        t = 1.0 + 0.5 * torch.rand(m, generator=g)
    else:
        t = torch.full((m,), 0.8)
    seed = (torch.arange(m, device=device), torch.zeros(m, dtype=torch.int64, device=device))
    return x, t.to(device), seed


def _old_team(columns: int, rows: int, most: int) -> tuple[int, int]:
    """The team rule before wider teams: at most 16 members of 8192 columns or more."""
    parts = max(1, min(16, columns // 8192, most))
    return max(1, min(rows, most // parts)), parts


def _calls(f, flat: tuple, t08: tuple, p90: torch.Tensor, k1000: torch.Tensor) -> dict:
    return {
        "top_p flat": lambda: f.sample_topp(*flat, p90, None)[0],
        "top_p t08": lambda: f.sample_topp(*t08, p90, None)[0],
        "top_k=1000 flat": lambda: f.sample_topk(*flat, k1000, None, None, plain=True),
        "top_p round 1 flat": lambda: f.topp_rounds(*flat, p90, None)[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python scripts/sampling-rest-sweep.py")
    p.add_argument("--columns", type=int, default=151552)
    p.add_argument("--rows", default="1,4,16,64,256")
    p.add_argument("--rules", default="old,new")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = [int(m) for m in args.rows.split(",")]
    if device.type == "cpu":  # a dry run under TRITON_INTERPRET=1: numpy's exp and floor
        import triton.language as tl

        from logits_gather.sampling.kernels import radix, waiters, writers

        waiters.libdevice = radix.libdevice = writers.libdevice = tl.math
    else:
        warm = torch.randn(4096, 4096, device=device)
        for _ in range(50):
            warm @ warm
    first: dict[tuple, torch.Tensor] = {}
    new_team, new_teams = fused.rest_team, fused.rest_teams
    for rule in args.rules.split(","):
        if rule == "old":
            fused.rest_team, fused.rest_teams = _old_team, lambda columns, most: (0, {})
        else:
            fused.rest_team, fused.rest_teams = new_team, new_teams
        f = Ranks(1, args.columns, max(rows), device, wait_ctas=0, single_rows=0).fused[0]
        print(f"rule {rule} (us, graph replay)", flush=True)
        for m in rows:
            grid = f.rest_grid(torch.empty(m, args.columns, device=device))
            xf, tf, sf = _inputs(m, args.columns, device, True)
            x8, t8, s8 = _inputs(m, args.columns, device, False)
            p90 = torch.full((m,), 0.9, dtype=torch.float64, device=device)
            k1000 = torch.full((m,), 1000, dtype=torch.int64, device=device)
            calls = _calls(f, (xf, tf, sf), (x8, t8, s8), p90, k1000)
            line = []
            for name, fn in calls.items():
                us = graph_us(fn, 50, 5)
                tok = fn()
                key = (name, m)
                differ = ""
                if "round 1" not in name:
                    if key in first:
                        n = int((first[key] != tok).sum())
                        differ = f" DIFFER {n}" if n else ""
                    else:
                        first[key] = tok.clone()
                    if int((tok < 0).sum()):
                        differ += f" UNDECIDED {int((tok < 0).sum())}"
                line.append(f"{name}={us:.1f}{differ}")
            print(f"  M={m} grid={grid}: " + "  ".join(line), flush=True)
    fused.rest_team, fused.rest_teams = new_team, new_teams


if __name__ == "__main__":
    main()
