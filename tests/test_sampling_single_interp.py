"""The one-launch rounds (:mod:`logits_gather.sampling.single`, ``single_filters``) run
by Triton's interpreter on the CPU at world size 1, against the definition: greedy,
sample, logprobs, min-p, top-k (one and two launches for the probe, by geometry), top-p,
top-k with top-p and min-p, and a per-row top-k whose rows turn it off, on rows with
ties, NaN and long runs of equal values, with programs working by program id and by
ticket (then also each column's row order). Skipped where Triton is not installed (CI);
runs in a subprocess because ``TRITON_INTERPRET`` must be set before Triton is
imported. The world-size 1 limit: interpreted programs run one after another, so a
reader cannot wait for a peer's writer of the same launch (the GPU tests cover that)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def test_one_launch_rounds_match_the_definition() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    script = ROOT / "scripts" / "sampling-interpret-check.py"
    run = subprocess.run([sys.executable, str(script), "--single"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "FAILURES: 0" in run.stdout, out[-4000:]
    ran = next(line for line in run.stdout.splitlines() if line.startswith("one-launch"))
    for kernel in ("greedy_one", "sample_one", "logprobs_one", "minp_one", "probe_one",
                   "topk_one"):  # fmt: skip
        assert kernel in ran, ran
    assert "tickets in row order per column, counters reset: ok" in run.stdout, out[-4000:]
    assert "topk_f mixed (one launch, tickets) rank 0: ok" in run.stdout, out[-4000:]
    assert "rowk mixed (one launch, tickets) rank 0: ok" in run.stdout, out[-4000:]
