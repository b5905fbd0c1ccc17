"""``reference.sample`` against vLLM 0.33's own V2 sampler kernels on CPU.

vLLM's ``apply_temperature``, ``apply_min_p`` and ``gumbel_sample`` run under
``TRITON_INTERPRET=1`` in a child process (:mod:`tests.sampling.vllm_oracle`), token for token
over 576 rows: bf16, fp16 and fp32 logits with -inf entries and tied maxima,
temperatures 0, 1, 0.7, 1.3, 0.05 and 2, negative and 64-bit seeds, large and small
positions, min-p 0, 0.05, 0.3 and 0.9.

- The packed wheel files (``LOGITS_GATHER_VLLM_KERNELS=/path/vllm-kernels.tgz``, or
  ``.dev-vllm/vllm-kernels.tgz``): skipped without Triton or without the file.
- The installed ``vllm`` package (marked ``vllm``: CI's vLLM venv, whose CUDA torch
  brings Triton), with no packed files.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.sampling import vllm_oracle

pytestmark = pytest.mark.interp
ROOT = str(vllm_oracle.ROOT)


def _run(choice: str | None) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT, VLLM_TARGET_DEVICE="cpu")
    if choice is not None:
        env[vllm_oracle.ENV] = choice
    out = subprocess.run(
        [sys.executable, "-m", "tests.sampling.vllm_oracle", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "576 rows, 0 mismatches" in out.stdout, out.stdout


def test_reference_equals_packed_vllm_kernels() -> None:
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton (TRITON_INTERPRET=1 runs vLLM's kernels on CPU)")
    tgz = vllm_oracle.packed()
    if tgz is None:
        pytest.skip(f"no packed vLLM kernels ({vllm_oracle.ENV}=/path/vllm-kernels.tgz)")
    _run(str(tgz))


@pytest.mark.vllm
def test_reference_equals_installed_vllm_kernels() -> None:
    if os.environ.get("LOGITS_GATHER_REQUIRE_VLLM") != "1":
        if importlib.util.find_spec("vllm") is None:
            pytest.skip("needs the real vllm package")
        if importlib.util.find_spec("triton") is None:
            pytest.skip("needs triton next to vllm")
    _run("installed")
