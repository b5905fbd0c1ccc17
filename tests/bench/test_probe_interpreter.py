"""The limit's barrier probe kernel, run by Triton's interpreter on the CPU: its vector
atomic adds exactly one per rank lane, epochs advance on the device, and a spin that
times out marks the probe dead. Skipped where Triton is not installed; runs in a
subprocess because ``TRITON_INTERPRET`` must be set before Triton is imported.
(``python -m pytest tests/bench/test_probe_interpreter.py``)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interp
pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import torch
from logits_gather.bench.gather import barrier_probe as bp

bp.kernel()
bp.globaltimer = lambda: 0  # the interpreter runs inline asm nowhere: time stands still
for world in (1, 2, 3, 8):
    flag = torch.zeros(4, dtype=torch.int32)
    ptrs = torch.tensor([flag.data_ptr()] * world, dtype=torch.int64)  # every lane: own flag
    counter = torch.zeros(2, dtype=torch.int32)
    p2 = max(2, 1 << (world - 1).bit_length())
    for _ in range(5):
        bp.kernel()[(1,)](ptrs, flag, counter, world, bp.TIMEOUT_NS, WORLD_P2=p2, num_warps=1)
    assert flag.tolist() == [5 * world, 0, 0, 0], (world, flag.tolist())
    assert counter.tolist() == [5, 0], (world, counter.tolist())
flag, never = torch.zeros(4, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
ptrs = torch.tensor([flag.data_ptr(), never.data_ptr()], dtype=torch.int64)
counter = torch.zeros(2, dtype=torch.int32)
bp.kernel()[(1,)](ptrs, flag, counter, 2, 0, WORLD_P2=2, num_warps=1)  # peer never signals
assert counter.tolist() == [1, 1] and never.tolist() == [1], (counter.tolist(), never.tolist())
print("ok")
"""


def test_barrier_probe_kernel_logic() -> None:
    env = dict(
        os.environ,
        TRITON_INTERPRET="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
