"""What every wing shares at collection. Markers select (``pyproject.toml``):

- ``gpu``: needs CUDA and Triton; skipped here, once for every wing, where either is
  missing (``bash scripts/gpu-tests.sh`` runs them: docs/gpu-testing.md).
- ``vllm``: needs the real vllm package; those modules skip themselves without it, unless
  ``LOGITS_GATHER_REQUIRE_VLLM=1`` (CI's vLLM venv) makes a broken install fail.
- ``interp``: runs Triton kernels in Triton's interpreter (``TRITON_INTERPRET=1``, in a
  subprocess) on the CPU; skipped where Triton is not installed.
"""

from __future__ import annotations

import pytest
import torch


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skips the ``gpu``-marked tests without a CUDA GPU and Triton."""
    if torch.cuda.is_available() and _has_triton():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and Triton")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
