"""Compiles every fused-sampling Triton kernel for sm_90 (no GPU needed) and prints
registers and spills: ``PYTHONPATH=. python scripts/sampling-compile-check.py``.

It also fails a multi-warp kernel with a poll loop that one warp can leave alone
(:func:`scripts.support.polls.warp_local_polls`; ``logits_gather.sampling.kernels.exchange``,
"Uniform polls")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile

from logits_gather.sampling.kernels import topk as T
from logits_gather.sampling.kernels import topp as N
from logits_gather.sampling.kernels import topp_exact as R
from logits_gather.sampling.kernels import waiters as F
from logits_gather.sampling.kernels import writers as K
from scripts.support.polls import warp_local_polls

TARGET = GPUTarget("cuda", 90, 32)
I64P, F32P = "*i64", "*fp32"


TYPES = {
    "t_ptr": F32P, "seed_ptr": I64P, "pos_ptr": I64P, "mp_ptr": F32P, "gbest_ptr": I64P,
    "ids_ptr": I64P,
    "out_ptr": I64P, "lp_ptr": F32P, "top_ids_ptr": I64P, "top_lp_ptr": F32P, "s_ptr": F32P,
    "g_ptr": F32P, "low_ptr": "*i32", "peers": I64P, "epoch": "*i32", "box": I64P, "status": "i64",
    "pstride": "i64", "relems": "i32", "p_ptr": "*fp64", "need_ptr": "*i1", "flags": "*i32",
    "lam_ptr": "*i32", "thr_ptr": I64P, "seen_ptr": "*i32", "arrivals": "*i32", "k_ptr": I64P,
    "dead": "*i32",
}  # fmt: skip


KNOWN_SPILLS = ("topk_final CAND=64", "topk_one", "nucleus_rest MINP=True ROWK=True")
"""Variants whose spills do not fail the check: top-k's final row work over tp=2's 64
candidate lanes of 64 slots at 8 warps hits 255 registers and spills (32 to 112 bytes
with triton 3.6, alone or after the overflow writer in one launch).
Its device time was measured with the spill (docs/design.md). The fallback's variant
for min-p with a per-row top-k (a count search, then a mass search) spills 104 to 112
bytes; it serves only rows the candidate rounds left, and was not timed on its own."""


def _sig(fn, x: str, const: dict) -> dict:
    return {
        a: "constexpr"
        if a in const
        else (x if a == "x_ptr" else TYPES.get(a, "i32"))
        if not (a == "k" and const.get("ROWK"))
        else I64P
        for a in fn.arg_names
    }


def variants():
    """(name, kernel, signature, constexprs, warps) for every variant the sampler launches."""
    local = {"BLOCK": 4096, "WORLD": 2, "THREADS": 256}
    for dt in ("bf16", "fp32"):
        x, bits = f"*{dt}", 16 if dt == "bf16" else 32
        yield "greedy_local", K.greedy_local, x, dict(local, XBITS=bits, PAIRS=bits == 16), 8
        yield "sample_local", K.sample_local, x, local, 8
        yield "topk_probe G=8", T.topk_probe, x, dict(local, G=8, PAIRS=bits == 16), 8
        for kp in (2, 64):
            yield f"topk_local KP={kp}", T.topk_local, x, dict(local, KP=kp), 8
            for rowk in (False, True):
                consts = dict(local, KP=kp, BITS=bits, ROWK=rowk, SP=32)
                yield f"topk_overflow KP={kp} ROWK={rowk}", T.topk_overflow, x, consts, 8
            for minp in (False, True):
                consts = dict(local, KP=kp, MINP=minp)
                yield f"rowk_local KP={kp} MINP={minp}", T.rowk_local, x, consts, 8
        yield "minp_local", K.minp_local, x, local, 8
        for minp, rowk in ((False, False), (True, True)):
            consts = dict(local, BLOCK=512, MEMB=32, MINP=minp, ROWK=rowk, TRAP=True)
            yield f"nucleus_rest MINP={minp} ROWK={rowk}", R.nucleus_rest, x, consts, 8
        for np_ in (0, 32):
            consts = dict(local, NP=np_, XBITS=bits)
            yield f"logprobs_local NP={np_}", K.logprobs_local, x, consts, 8
        for minp, rowk in ((False, False), (True, False), (True, True)):
            narrow = dict(local, BLOCK=2048, THREADS=128, SLOTS=55, MINP=minp, ROWK=rowk)
            yield f"nucleus_local MINP={minp} ROWK={rowk}", N.nucleus_local, x, narrow, 4
        again = dict(local, BLOCK=2048, THREADS=128, SLOTS=55)
        yield "again_local", N.again_local, x, again, 4
        yield from _ones(
            x, bits, dict(local, CAND=64, TRAP=True)
        )  # one launch (kernels/waiters.py)
    final = {"CAND": 64, "THREADS": 32, "TRAP": True}
    yield "greedy_final", F.greedy_final, None, dict(final, KEY=False), 1
    yield "greedy_final KEY", F.greedy_final, None, dict(final, KEY=True), 1
    for rowk, bits in ((False, 16), (True, 16), (False, 32)):
        reduce = dict(final, G=8, THREADS=128, ROWK=rowk, BITS=bits)
        yield f"topk_reduce G=8 ROWK={rowk} BITS={bits}", T.topk_reduce, None, reduce, 4
    yield "sample_final", F.sample_final, None, final, 1
    for topp, minp, rowk, xb, plain in ((0, 0, 0, 16, 0), (1, 0, 0, 16, 0), (1, 1, 1, 16, 0),
                                        (1, 0, 0, 32, 0), (0, 1, 1, 16, 1)):  # fmt: skip
        tf = dict(final, CAND=32, KP=64, THREADS=256, TOPP=topp, MINP=minp, ROWK=rowk, XBITS=xb,
                  PLAIN=plain)  # fmt: skip
        name = f"topk_final TOPP={topp} MINP={minp} ROWK={rowk} XBITS={xb} PLAIN={plain}"
        yield name, T.topk_final, None, tf, 8
        tf = dict(tf, CAND=64)  # tp=2's geometry (38 splits): spills (KNOWN_SPILLS)
        yield f"topk_final CAND=64 TOPP={topp} XBITS={xb} PLAIN={plain}", T.topk_final, None, tf, 8
    yield "logprobs_final NP=0", F.logprobs_final, None, dict(final, NP=0), 1
    yield "logprobs_final NP=32", F.logprobs_final, None, dict(final, NP=32, THREADS=128), 4
    for xb in (16, 32):
        nf = dict(final, CAND=128, SLOTS=55, LANES=4096, THREADS=256, XBITS=xb)
        for rowk in (False, True):  # a per-row k with top-p (nucleus_k_row)
            nfk = dict(nf, ROWK=rowk)
            yield f"nucleus_final XBITS={xb} ROWK={rowk}", N.nucleus_final, None, nfk, 8
        yield f"again_final XBITS={xb}", N.again_final, None, nf, 8
    # A small vocabulary (the GPU tests' 4099 columns per rank at tp=2): fewer splits
    # than threads, so the polls' words are replicated across warps. Checked for their
    # polls only: spills there cost no production time.
    small = dict(final, CAND=8, SLOTS=64, LANES=512, THREADS=256, XBITS=16)
    for rowk in (False, True):
        name = "nucleus_final ROWK small" if rowk else "nucleus_final small"
        yield name, N.nucleus_final, None, dict(small, ROWK=rowk), 8
    yield "again_final small", N.again_final, None, small, 8
    reduce = dict(final, CAND=8, G=8, THREADS=128, ROWK=True, BITS=16)
    yield "topk_reduce small", T.topk_reduce, None, reduce, 4
    tf = dict(final, CAND=8, KP=2, THREADS=256, TOPP=1, MINP=1, ROWK=1, XBITS=16, PLAIN=0)
    yield "topk_final small", T.topk_final, None, tf, 8
    yield "logprobs_final small", F.logprobs_final, None, dict(final, CAND=8, NP=8, THREADS=128), 4
    one = {"BLOCK": 4096, "WORLD": 2, "THREADS": 256, "CAND": 8, "TRAP": True}
    yield "greedy_one small", F.greedy_one, "*bf16", dict(one, KEY=False, XBITS=16, PAIRS=True), 8
    yield "logprobs_one small", F.logprobs_one, "*bf16", dict(one, NP=0, XBITS=16), 8
    probe = dict(one, G=8, ROWK=True, BITS=16, THREADS=64, PAIRS=True)  # the plan's probe_one there
    yield "probe_one small", T.probe_one, "*bf16", probe, 2
    tk = dict(one, KP=2, BITS=16, ROWK=True, SP=2, TOPP=1, MINP=1, THREADS=32, PLAIN=False)
    yield "topk_one small", T.topk_one, "*bf16", tk, 1


def _ones(x: str, bits: int, one: dict):
    """The one-launch variants (kernels/waiters.py) over ``one``'s constants."""
    tag = ""
    yield f"greedy_one{tag}", F.greedy_one, x, dict(one, KEY=False, XBITS=bits, PAIRS=bits == 16), 8
    yield (
        f"greedy_one KEY{tag}",
        F.greedy_one,
        x,
        dict(one, KEY=True, XBITS=bits, PAIRS=bits == 16),
        8,
    )
    one_narrow = dict(one, BLOCK=2048, THREADS=128, CAND=128)
    yield f"sample_one{tag}", F.sample_one, x, one_narrow, 4
    yield f"logprobs_one NP=0{tag}", F.logprobs_one, x, dict(one, NP=0, XBITS=bits), 8
    yield f"logprobs_one NP=8{tag}", F.logprobs_one, x, dict(one_narrow, NP=8, XBITS=bits), 4
    yield f"minp_one{tag}", F.minp_one, x, one_narrow, 4
    for rowk in (False, True):  # one launch, tp=2's top_k=50 plan
        probe = dict(one, G=8, ROWK=rowk, BITS=bits, PAIRS=bits == 16)
        yield f"probe_one G=8 ROWK={rowk}{tag}", T.probe_one, x, probe, 8
        for topp, minp in ((0, 0), (1, 1)):
            tk = dict(one, KP=64, BITS=bits, ROWK=rowk, SP=32, TOPP=topp, MINP=minp, PLAIN=False)
            yield f"topk_one KP=64 ROWK={rowk} TOPP={topp}{tag}", T.topk_one, x, tk, 8
            if rowk and not topp:  # a per-row k without top-p (nucleus_k_row)
                tk = dict(tk, PLAIN=True)
                yield f"topk_one KP=64 ROWK=True PLAIN{tag}", T.topk_one, x, tk, 8


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
    for name, fn, x, const, warps in variants():
        const = dict(const, PDL=True)  # as launched with one rank per GPU on sm_90
        sig = _sig(fn, x, const)
        try:
            ck = compile(
                ASTSource(fn=fn, signature=sig, constexprs=const),
                target=TARGET,
                options={"num_warps": warps},
            )
            regs, spills = _usage(ck.asm["cubin"])
            local = warp_local_polls(ck.asm["ptx"]) if warps > 1 else []
            note = f" WARP-LOCAL POLL EXIT at {', '.join(local)}" if local else ""
            known = name.endswith(" small") or name.startswith(KNOWN_SPILLS)
            note += " (known)" if spills and known else ""
            print(f"{name:<28} regs={regs:<4} spill bytes={spills}{note}")
            bad += (spills > 0 and not known) or bool(local)
        except Exception as exc:  # noqa: BLE001 - report every failure
            print(f"{name:<28} FAILED: {type(exc).__name__}: {str(exc)[:2000]}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
