"""The fused top-p and top-k kernels on adversarial rows, one GPU, one rank, against the
definition in bfloat16, float16 and float32 (the harness: ``tests/sampling/exact.py``,
which says which rows it draws). A subprocess, so that its compile cache and CUDA context
stay out of the other GPU tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_fused_filters_exact_on_adversarial_rows() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "sampling" / "exact.py")], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
