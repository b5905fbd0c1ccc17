"""The per-row top-k's pick kernel (:mod:`logits_gather.sampling.pick`), run by Triton's
interpreter on the CPU against the torch ops it replaced, over M across its block, k at
and around every edge (0, 1, 64, 65, V - 1, V, above V), with the flag set and or-ed.
Skipped where Triton is not installed (CI); runs in a subprocess because
``TRITON_INTERPRET`` must be set before Triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import torch
from logits_gather.sampling.pick import pick_rows_k

V = 1000
gen = torch.Generator().manual_seed(5)
edges = torch.tensor([0, 1, 2, 63, 64, 65, 500, V - 1, V, V + 7])
for m in (1, 3, 255, 256, 257, 600):
    for unserved in (False, True):
        for before in (False, True):
            k = edges[torch.randint(0, len(edges), (m,), generator=gen)]
            k = torch.where((k > 64) & (k < V), 64, k) if not unserved else k
            if unserved:
                k[torch.randint(0, m, (1,), generator=gen)] = 65
            topk = torch.randint(0, V, (m,), generator=gen)
            other = torch.randint(0, V, (m,), generator=gen)
            fast = (k >= 1) & (k <= 64)
            want = torch.where(fast, topk, other)
            need = torch.tensor([before])
            pick_rows_k[(1, 1)](k, topk, other, topk, need, m, V, KMAX=64, BLOCK=256,
                                OR=True, num_warps=4)
            assert torch.equal(topk, want), (m, unserved)
            assert bool(need) == (before or bool(((k > 64) & (k < V)).any())), (m, unserved)
            need = torch.tensor([True])  # OR off: the flag is set, not or-ed
            out = torch.full((m,), -1)
            pick_rows_k[(1, 1)](k, want, want, out, need, m, V, KMAX=64, BLOCK=256, OR=False,
                                num_warps=4)
            assert torch.equal(out, want) and bool(need) == unserved, (m, unserved)
print("ok")
"""


def test_pick_rows_k_matches_the_torch_ops() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
