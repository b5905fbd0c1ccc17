"""The fused head kernel in Triton's interpreter on the CPU (harness: tests/head/interp.py):
tiles, masks, rounding, the push into every rank's slot and the call counters. Skipped
where Triton is not installed; runs in a subprocess because ``TRITON_INTERPRET``
must be set before Triton is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interp
pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


def test_head_kernel_in_the_interpreter() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "head" / "interp.py")], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0 and "FAILURES: 0" in run.stdout, (run.stdout + run.stderr)[-4000:]
