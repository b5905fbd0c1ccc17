"""The poll loops of the fused waiters and of the in-kernel fallback, compiled for sm_90
(needs Triton, no GPU): no multi-warp poll may leave its loop on a test that one warp
decides alone (:mod:`logits_gather.sampling.kernels.exchange`, "Uniform polls"). Skipped where
Triton is absent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sampling-compile-check.py"


def _check():
    spec = importlib.util.spec_from_file_location("sampling_compile_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


POLLERS = (
    "nucleus_final",
    "again_final",
    "topk_reduce",
    "topk_final",
    "logprobs_final",
    "nucleus_rest",
)


@pytest.mark.parametrize("which", ["small", "production"])
def test_multi_warp_polls_exit_together(which: str) -> None:
    from triton.compiler import ASTSource, compile

    from scripts.support.polls import warp_local_polls

    check = _check()
    seen = 0
    for name, fn, x, const, warps in check.variants():
        if (
            warps == 1
            or not name.startswith(POLLERS)
            or name.endswith(" small") != (which == "small")
        ):
            continue
        sig = check._sig(fn, x, const)
        ck = compile(
            ASTSource(fn=fn, signature=sig, constexprs=const),
            target=check.TARGET,
            options={"num_warps": warps},
        )
        assert warp_local_polls(ck.asm["ptx"]) == [], name
        seen += 1
    assert seen >= 5
