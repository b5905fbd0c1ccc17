"""The benchmark's command lines run as subprocesses on the CPU (this wing's tests)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cpu_env() -> dict[str, str]:
    """This process's environment with no GPU visible, gloo on the loopback interface and
    this checkout first on ``PYTHONPATH``."""
    return dict(
        os.environ,
        CUDA_VISIBLE_DEVICES="",
        GLOO_SOCKET_IFNAME="lo",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
