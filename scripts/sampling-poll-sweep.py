"""Compiles every waiting (final) kernel of the fused sampling path at the geometries the
sampler derives for each vocabulary and tp, for sm_90 (no GPU needed), and fails any
whose poll loop one warp can leave alone (:mod:`scripts.support.polls`, the
check the launcher makes at first launch). Registers and spills are
``scripts/sampling-compile-check.py``'s job.

``PYTHONPATH=. python scripts/sampling-poll-sweep.py [--vocab 151552,32000] [--tp 1,2,4,8]
[--columns 4099]`` (``--columns``: per-rank widths to add at every tp, as the GPU
tests use).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from triton.compiler import ASTSource, compile

from logits_gather.sampling.fused.plans import (
    FINAL_WARPS,
    NARROW,
    TOPP_LANES,
    WIDE,
    Geometry,
    pow2,
    room,
    select_warps,
)
from logits_gather.sampling.kernels import topk as T
from logits_gather.sampling.kernels import topp as N
from logits_gather.sampling.kernels import waiters as F
from scripts.support.polls import warp_local_polls

_spec = importlib.util.spec_from_file_location(
    "sampling_compile_check", Path(__file__).with_name("sampling-compile-check.py")
)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

KS = (1, 2, 3, 8, 20, 40, 50, 64)  # top_k values (each its own top-k geometry)
TOP_NS = (1, 2, 5, 8, 20)  # logprobs top_n values


def waiters(columns: int, world: int):
    """(name, kernel, constexprs, warps) of every multi-warp kernel that waits, at one
    geometry."""
    wide, narrow = Geometry.of(columns, world, *WIDE), Geometry.of(columns, world, *NARROW)
    base = {"TRAP": True}
    for k in KS:
        plan = wide.topk(k)
        for rowk in (False, True):
            reduce = dict(base, CAND=wide.cand, G=plan.g, ROWK=rowk, BITS=16)
            yield f"topk_reduce k={k} rowk={rowk}", T.topk_reduce, reduce, plan.reduce
            for topp, minp in ((0, 0), (1, 1)):  # a per-row k without top-p: PLAIN (nucleus_k_row)
                tf = dict(base, CAND=wide.cand, KP=plan.kp, TOPP=topp, MINP=minp, ROWK=rowk,
                          PLAIN=rowk and not topp)  # fmt: skip
                yield (
                    f"topk_final k={k} rowk={rowk} topp={topp}",
                    T.topk_final,
                    dict(tf, XBITS=16),
                    plan.final,
                )
    slots = max(1, min(64, TOPP_LANES // narrow.c))
    lanes = pow2(narrow.c * slots)
    nf = dict(base, CAND=narrow.cand, SLOTS=slots, LANES=lanes, XBITS=16)
    for rowk in (False, True):  # a per-row k with top-p (nucleus_k_row)
        nfk = dict(nf, ROWK=rowk)
        yield f"nucleus_final rowk={rowk}", N.nucleus_final, nfk, select_warps(lanes, FINAL_WARPS)
    yield "again_final", N.again_final, nf, select_warps(lanes, FINAL_WARPS)
    for n in TOP_NS:
        lp = dict(base, CAND=narrow.cand, NP=room(n))
        yield f"logprobs_final top_n={n}", F.logprobs_final, lp, 4
    # The one-launch kernels (kernels/waiters.py) wait inside their writers' geometry.
    yield from _ones(wide, narrow, base, world)


def _ones(wide, narrow, base: dict, world: int):
    tag = ""
    one = dict(base, BLOCK=wide.block, WORLD=world, CAND=wide.cand)
    one_n = dict(base, BLOCK=narrow.block, WORLD=world, CAND=narrow.cand)
    yield f"greedy_one{tag}", F.greedy_one, dict(one, KEY=False, XBITS=16), wide.warps
    yield f"sample_one{tag}", F.sample_one, one_n, narrow.warps
    yield f"logprobs_one top_n=0{tag}", F.logprobs_one, dict(one, NP=0, XBITS=16), wide.warps
    for n in TOP_NS:
        lp = dict(one_n, NP=room(n), XBITS=16)
        yield f"logprobs_one top_n={n}{tag}", F.logprobs_one, lp, narrow.warps
    yield f"minp_one{tag}", F.minp_one, one_n, narrow.warps
    for k in KS:  # kernels/waiters.py: warps from the plan (0: two launches there)
        plan = wide.topk(k)
        for rowk in (False, True):
            probe = dict(one, G=plan.g, ROWK=rowk, BITS=16)
            if plan.probe_one:
                yield f"probe_one k={k} rowk={rowk}{tag}", T.probe_one, probe, plan.probe_one
            tk = dict(one, KP=plan.kp, BITS=16, ROWK=rowk, SP=pow2(wide.splits), TOPP=1, MINP=1,
                      PLAIN=False)  # fmt: skip
            yield f"topk_one k={k} rowk={rowk}{tag}", T.topk_one, tk, plan.final_one
            if rowk:  # without top-p: the off rows sample here (nucleus_k_row)
                tk = dict(tk, TOPP=0, PLAIN=True)
                yield f"topk_one k={k} rowk plain{tag}", T.topk_one, tk, plan.final_one


def main() -> int:
    p = argparse.ArgumentParser(prog="python scripts/sampling-poll-sweep.py")
    p.add_argument("--vocab", default="151552,32000")
    p.add_argument("--tp", default="1,2,4,8")
    p.add_argument("--columns", default="4099")
    a = p.parse_args()
    tps = [int(t) for t in a.tp.split(",")]
    shapes = {(-(-int(v) // t), t) for v in a.vocab.split(",") for t in tps}
    shapes |= {(int(c), t) for c in a.columns.split(",") if c for t in tps}
    seen: set = set()
    bad = 0
    for columns, world in sorted(shapes):
        for name, fn, const, warps in waiters(columns, world):
            const = dict(const, THREADS=32 * warps)
            key = (fn, tuple(sorted(const.items())), warps)
            if warps == 1 or key in seen:
                continue
            seen.add(key)
            ck = compile(
                ASTSource(fn=fn, signature=check._sig(fn, "*bf16", const), constexprs=const),
                target=check.TARGET,
                options={"num_warps": warps},
            )
            local = warp_local_polls(ck.asm["ptx"])
            if local:
                bad += 1
                print(f"columns={columns} tp={world} {name} ({warps} warps): warp-local "
                      f"poll exit at {', '.join(local)}")  # fmt: skip
    print(f"{len(seen)} variants compiled, {bad} with a warp-local poll exit")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
