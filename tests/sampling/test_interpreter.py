"""The fused sampling kernels run by Triton's interpreter on the CPU, against the
definition (harnesses: ``tests/sampling/interp.py``, ``tests/sampling/interp_rounds.py``).

- Every fused operation at tp 1, 2 and 3, ranks as threads.
- Top-p's second round skipped and run across a sequence of calls.
- Top-p's in-kernel fallback serving no row once the sampler's device flag records a
  timed-out wait.
- The one-launch rounds (:mod:`logits_gather.sampling.kernels.waiters`, the filters' rounds) at
  world size 1: greedy, sample, logprobs, min-p, top-k, top-p, top-k with top-p and
  min-p, and a per-row top-k whose rows turn it off, on rows with ties, NaN and long
  runs of equal values. Interpreted programs run one after
  another, so a reader cannot wait for a peer's writer of the same launch (the GPU tests
  cover that).

- Issue 67's adversarial rows (``--adversarial``: ties at the cuts across shard
  boundaries, flat rows, rows kept whole, one token holding the mass; the rows of
  ``tests/sampling/test_exactness.py``) through top-p, top-k and a per-row top-k at world
  size 1 (every row, the in-kernel fallback included) and tp 2.

By default only the smoke run (``--smoke``: every operation on the narrowest shards at
world size 1, tp 2 and 3; about 3 minutes), the adversarial rows (about a minute) and
the round-2 harness run. The whole harness
takes over 50 minutes on a CPU core: ``LOGITS_GATHER_INTERP_FULL=1`` runs it too. Skipped
where Triton is not installed; each runs in a subprocess because ``TRITON_INTERPRET`` must
be set before Triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interp
pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


def _interpret(script: str, *args: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)  # the caller's Triton too
    run = subprocess.run([sys.executable, str(Path(__file__).with_name(script)), *args], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "FAILURES: 0" in run.stdout, out[-4000:]
    return run


FULL = pytest.mark.skipif(
    os.environ.get("LOGITS_GATHER_INTERP_FULL") != "1",
    reason="over 50 minutes on a CPU core: set LOGITS_GATHER_INTERP_FULL=1",
)


def test_every_operation_on_narrow_shards() -> None:
    run = _interpret("interp.py", "--smoke")
    for world in (1, 2, 3):  # each world size ran
        assert f"world={world} n=" in run.stdout, run.stdout[-4000:]
    assert "topp" in run.stdout and "rowkp" in run.stdout, run.stdout[-4000:]


def test_adversarial_rows_match_the_definition() -> None:
    run = _interpret("interp.py", "--adversarial")
    for world, n in ((1, 768), (2, 384)):  # each world size ran
        assert f"world={world} n={n}" in run.stdout, run.stdout[-4000:]
    assert "rows the in-kernel fallback served" in run.stdout, run.stdout[-4000:]


@FULL
def test_fused_operations_match_the_definition() -> None:
    _interpret("interp.py")


def test_top_p_round_two_across_calls() -> None:
    _interpret("interp_rounds.py")


@FULL
def test_one_launch_rounds_match_the_definition() -> None:
    run = _interpret("interp.py", "--single")
    out = run.stdout + run.stderr
    ran = next(line for line in run.stdout.splitlines() if line.startswith("one-launch"))
    for kernel in ("greedy_one", "sample_one", "logprobs_one", "minp_one", "probe_one",
                   "topk_one"):  # fmt: skip
        assert kernel in ran, ran
    assert "n=9000 m=6 topk_f mixed (one launch) rank 0: ok" in run.stdout, out[-4000:]
    assert "n=9000 m=6 rowk mixed (one launch) rank 0: ok" in run.stdout, out[-4000:]
