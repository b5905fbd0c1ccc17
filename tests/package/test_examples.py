"""The README's runnable example (examples/quickstart.py) runs and its checks pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scripts.support.dist import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_runs() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOO_SOCKET_IFNAME="lo", CUDA_VISIBLE_DEVICES="")
    env["MASTER_PORT"] = str(free_port())
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "gathered (8, 151552) on cpu" in run.stdout, run.stdout
