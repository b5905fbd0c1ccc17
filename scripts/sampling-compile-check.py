"""Compiles every fused-sampling Triton kernel for sm_90 (no GPU needed) and prints
registers and spills: ``PYTHONPATH=. python scripts/sampling-compile-check.py``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile

from logits_gather.sampling import kernels as K

TARGET = GPUTarget("cuda", 90, 32)
I64P, F32P = "*i64", "*fp32"


def variants():
    for dt in ("bf16", "fp32"):
        x = f"*{dt}"
        yield (
            "greedy_local",
            K.greedy_local,
            {
                "x_ptr": x,
                "x_stride": "i32",
                "out_ptr": F32P,
                "out_stride": "i32",
                "N": "i32",
                "col0": "i32",
                "BLOCK": "constexpr",
            },
            {"BLOCK": 4096},
            8,
        )
        for kp in (0, 2, 64):
            yield (
                f"sample_local KP={kp}",
                K.sample_local,
                {
                    "x_ptr": x,
                    "x_stride": "i32",
                    "t_ptr": F32P,
                    "seed_ptr": I64P,
                    "out_ptr": F32P,
                    "out_stride": "i32",
                    "N": "i32",
                    "col0": "i32",
                    "BLOCK": "constexpr",
                    "KP": "constexpr",
                },
                {"BLOCK": 4096, "KP": kp},
                8,
            )
        yield (
            "scores_kernel",
            K.scores_kernel,
            {
                "x_ptr": x,
                "x_stride": "i32",
                "t_ptr": F32P,
                "seed_ptr": I64P,
                "s_ptr": F32P,
                "g_ptr": F32P,
                "N": "i32",
                "col0": "i32",
                "BLOCK": "constexpr",
            },
            {"BLOCK": 4096},
            8,
        )
        yield (
            "minp_local",
            K.minp_local,
            {
                "x_ptr": x,
                "x_stride": "i32",
                "t_ptr": F32P,
                "seed_ptr": I64P,
                "logmp_ptr": F32P,
                "gx_ptr": F32P,
                "gx_row_words": "i32",
                "GC": "i32",
                "out_ptr": F32P,
                "out_stride": "i32",
                "N": "i32",
                "col0": "i32",
                "BLOCK": "constexpr",
                "CAND": "constexpr",
            },
            {"BLOCK": 4096, "CAND": 64},
            8,
        )
        for np_ in (0, 32):
            yield (
                f"logprobs_local NP={np_}",
                K.logprobs_local,
                {
                    "x_ptr": x,
                    "x_stride": "i32",
                    "ids_ptr": I64P,
                    "out_ptr": F32P,
                    "out_stride": "i32",
                    "N": "i32",
                    "col0": "i32",
                    "BLOCK": "constexpr",
                    "NP": "constexpr",
                },
                {"BLOCK": 4096, "NP": np_},
                8,
            )
    yield (
        "greedy_final",
        K.greedy_final,
        {"g_ptr": F32P, "out_ptr": I64P, "row_words": "i32", "C": "i32", "CAND": "constexpr"},
        {"CAND": 64},
        4,
    )
    for kp, kc in ((0, 1), (64, 4096)):
        yield (
            f"sample_final KP={kp}",
            K.sample_final,
            {
                "g_ptr": F32P,
                "t_ptr": F32P,
                "out_ptr": I64P,
                "row_words": "i32",
                "C": "i32",
                "k": "i32",
                "CAND": "constexpr",
                "KP": "constexpr",
                "KCAND": "constexpr",
            },
            {"CAND": 64, "KP": kp, "KCAND": kc},
            8,
        )
    for np_, nc in ((0, 1), (32, 2048)):
        yield (
            f"logprobs_final NP={np_}",
            K.logprobs_final,
            {
                "g_ptr": F32P,
                "ids_ptr": I64P,
                "lp_ptr": F32P,
                "top_ids_ptr": I64P,
                "top_lp_ptr": F32P,
                "row_words": "i32",
                "rank_words": "i32",
                "S": "i32",
                "C": "i32",
                "N": "i32",
                "W": "i32",
                "n": "i32",
                "CAND": "constexpr",
                "NP": "constexpr",
                "NCAND": "constexpr",
            },
            {"CAND": 64, "NP": np_, "NCAND": nc},
            8,
        )
    yield (
        "noise_kernel",
        K.noise_kernel,
        {
            "seed_ptr": I64P,
            "t_ptr": F32P,
            "x_ptr": F32P,
            "out_ptr": F32P,
            "N": "i32",
            "BLOCK": "constexpr",
        },
        {"BLOCK": 1024},
        4,
    )


def _usage(cubin: bytes) -> tuple[int, int]:
    """(registers, spill store bytes) from cuobjdump's resource usage."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run(
            [tool, "-res-usage", f.name], capture_output=True, text=True, check=True
        ).stdout
    regs = int(re.search(r"REG:(\d+)", text).group(1))
    spill = re.search(r"STACK:(\d+)", text)
    return regs, int(spill.group(1)) if spill else 0


def main() -> int:
    bad = 0
    for name, fn, sig, const, warps in variants():
        try:
            ck = compile(
                ASTSource(fn=fn, signature=sig, constexprs=const),
                target=TARGET,
                options={"num_warps": warps},
            )
            regs, spills = _usage(ck.asm["cubin"])
            print(f"{name:<28} regs={regs:<4} spill bytes={spills}")
            bad += spills > 0
        except Exception as exc:  # noqa: BLE001 - report every failure
            print(f"{name:<28} FAILED: {type(exc).__name__}: {str(exc)[:2000]}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
