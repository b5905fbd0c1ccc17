"""The fused launch sequences of the filters: top-k (with min-p and top-p over the
exact top-k set, :mod:`.topk`) and top-p without top-k (:mod:`.nucleus`,
:mod:`.spill`). Each is several rounds of writers and waiting kernels on one
:class:`~.fused.Fused`'s geometries and mailboxes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from . import geometry
from .filters import MAX_CANDIDATES
from .geometry import _pow2, _warps, idle_programs

if TYPE_CHECKING:
    from .fused import Fused


FINAL_WARPS = 8
"""Warps of top-p's final kernels (4096 candidate lanes at tp=2); no fused kernel runs
more than 8 (``tests/test_sampling_cpu.py``). At 16, nucleus_final's optimised machine
code is wrong: on the same mailbox words, float16 and float32 rows with no valid
candidate took the decided branch (token 2**32 - 1) or computed a round-2 level, where
8 warps (also when capped at 128 registers with ``maxnreg``) and 4 warps said
"undecided". The same PTX through ``ptxas --opt-level 0`` gave the right rows, levels 1
to 3 the wrong ones, and a copy that stored its intermediate values was right: a ptxas
fault, or undefined behaviour in the PTX that only its optimiser exploits (not found).
16 warps were also no faster (15.4 against 14.9 us at M=64 on one H200)."""


def xbits(dtype: torch.dtype) -> int:
    """Bits of the radix keys of x (:func:`.keys.radix_bits`) that the overflow writer
    and the final kernels (:func:`.masses._decode`) use: 16 for bfloat16 inputs (their
    values fill the top 16 of fp32's), else 32."""
    return 16 if dtype == torch.bfloat16 else 32


def sample_topk(
    fused: Fused,
    shard: torch.Tensor,
    t: torch.Tensor,
    seed: torch.Tensor,
    k: int | torch.Tensor,
    p: torch.Tensor | None,
    min_p: torch.Tensor | None,
    need: torch.Tensor | None = None,
) -> torch.Tensor:
    """Top-k (``k`` 1..64, or int64 ``[M]``: rows outside 1..64 get junk tokens), then
    min-p (``min_p`` fp32 ``[M]``) and top-p (``p`` float64 or float32 ``[M]``, rows ``>= 1``
    off) over the exact top-k set (:mod:`.topk`). With ``need`` (bool ``[1]``; ``k`` a
    tensor, no ``p``), rows whose ``k`` is off (0 or ``>= V``) are sampled without top-k
    (after min-p) in the same launches, and ``need`` says whether a row has ``64 < k < V``
    (its token is junk; :mod:`.rowk`).

    Round 1: the largest x of G column groups per split (G * c >= k) bound the
    row's k-th from below; round 2: each split sends every element at or above it,
    or (rare, a second writer) its k largest. Five launches; in eager calls three
    (:mod:`.single_filters`: each round's waiting kernel joins its last writer; ranks
    that share a GPU: up to ``single_rows`` rows)."""
    rowk = isinstance(k, torch.Tensor)
    m, c, plan = shard.shape[0], fused.wide.c, fused.wide.topk(64 if rowk else k)
    g, kp = plan.g, plan.kp
    gbest, low = fused._new(shard), fused._new(shard, torch.int32)
    free, n = ((k,), ()) if rowk else ((), (k,))
    one = fused._single(shard)  # one launch per round (:mod:`.single_filters`)
    warps = plan.probe_one if one else 0
    consts = {"G": g, "ROWK": rowk, "BITS": xbits(shard.dtype)}
    if warps:
        fn = fused.sf.probe_one
        fused._one(fn, shard, "probe", (t, gbest, low, *free), (c,), consts, g, n, warps=warps)
    else:
        mb = fused._local(fused.k.topk_probe, shard, (), "probe", g, (), {"G": g}, plan.probe)
        fused._final(fused.f.topk_reduce, m, mb, (t, gbest, low, c, k), consts, plan.reduce)
    mb = fused.box(fused.words("sample_k", kp), m)
    if mb.flags is None:  # lives with its mailbox: graphs captured with it keep both
        mb.flags = torch.zeros(mb.capacity * fused.wide.splits, dtype=torch.int32,
                               device=shard.device)  # fmt: skip
    flags = mb.flags
    pv = t if p is None else p
    mpv = t if min_p is None else min_p
    filters = {"TOPP": p is not None, "MINP": min_p is not None, "PLAIN": need is not None}
    vocab = fused.columns * fused.world
    if need is not None:  # rows with k off sample here too (:mod:`.rowk`)
        head = (t, low, flags, k, seed, mpv, gbest, need)
        consts = {"KP": kp, "MINP": filters["MINP"], "KMAX": MAX_CANDIDATES}
        fused._local(fused.rk.rowk_local, shard, head, "sample_k", kp, (vocab,), consts)
    else:
        fused._local(fused.t.topk_local, shard, (t, low, flags), "sample_k", kp, (), {"KP": kp})
    splits = fused.wide.splits
    programs = idle_programs(m, splits, geometry.OVERFLOW_PROGRAMS, geometry.OVERFLOW_LEAST)
    out = fused._new(shard)
    over = {"KP": kp, "BITS": xbits(shard.dtype), "ROWK": rowk, "SP": _pow2(splits)}
    warps = plan.final_one if one else 0
    if warps:
        head = (t, seed, flags, pv, mpv, gbest, out, *free)
        fused._one(fused.sf.topk_one, shard, "sample_k", head, (splits, c, vocab),
                   over | filters, kp, n, programs, warps)  # fmt: skip
        return out
    fused._local(fused.ov.topk_overflow, shard, (t, seed, flags), "sample_k", kp, (k, splits),
                 over, programs=programs)  # fmt: skip
    tail = (t, seed, pv, mpv, gbest, out, c, k, vocab)
    consts = {"KP": kp, **filters, "ROWK": rowk, "XBITS": over["BITS"]}
    fused._final(fused.t.topk_final, m, mb, tail, consts, plan.final)
    return out


def sample_topp(
    fused: Fused,
    shard: torch.Tensor,
    t: torch.Tensor,
    seed: torch.Tensor,
    p: torch.Tensor,
    min_p: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-p (``p`` float64 or float32 ``[M]``), after min-p if ``min_p`` (fp32 ``[M]``):
    ``(tokens, need)``, tokens -1 where neither round could decide the nucleus and
    then ``need`` (bool ``[1]``) True (:mod:`.nucleus`, :mod:`.spill`). The rows
    round 1 left to round 2 are those whose ``fused.spilled`` is not DONE. Both rounds
    always run; :func:`topp_rounds` lets the caller skip round 2."""
    out, flags, second = topp_rounds(fused, shard, t, seed, p, min_p)
    second()
    return out, flags[:1]


def topp_rounds(
    fused: Fused,
    shard: torch.Tensor,
    t: torch.Tensor,
    seed: torch.Tensor,
    p: torch.Tensor,
    min_p: torch.Tensor | None,
    k: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None]]:
    """:func:`sample_topp`'s round 1, launched: ``(tokens, flags, second)``. ``flags``
    (bool ``[2]``) holds ``need`` and ``more``: some row is left to round 2 or ``need``
    is set (every rank computes the same ``more``, so all may skip round 2 alike).
    ``second()`` launches round 2; the tokens are final once it ran or ``more`` is
    False. ``fused.topp_flags`` is the last call's ``flags`` (diagnostics). With ``k``
    (a per-row ``top_k``, int64 ``[M]``, values >= 0), top-k applies before top-p in
    the rows where it is on (:mod:`.rowk`; such rows never go to round 2)."""
    m, slots = shard.shape[0], fused.nucleus_slots
    gbest = fused.greedy(shard, key=True)
    mp = p if min_p is None else min_p
    # flags and lam are set by nucleus_local (False, DONE), not by fill kernels. lam starts
    # DONE there: a harness that runs writers before the waiting kernels before them
    # (tests.emulated's warm) then has every rank skip every row alike in round 2.
    flags = torch.empty(2, dtype=torch.bool, device=shard.device)
    lam = fused._new(shard, torch.int32)
    kv, vocab = (t, 0) if k is None else (k, fused.columns * fused.world)
    head = (t, seed, p, mp, gbest, lam, flags, kv)
    consts = {"SLOTS": slots, "MINP": min_p is not None, "ROWK": k is not None}
    mb = fused._local(fused.n.nucleus_local, shard, head, "nucleus", 0, (vocab,), consts)
    out = fused._new(shard)
    thr = fused._new(shard)
    fused.spilled, fused.topp_flags = lam, flags
    lanes = _pow2(fused.narrow.c * slots)
    consts = {"SLOTS": slots, "LANES": lanes, "XBITS": xbits(shard.dtype)}
    tail = (t, seed, p, gbest, out, flags, lam, thr, fused.narrow.c, kv, vocab)
    warps = _warps(lanes, FINAL_WARPS)
    rowk = {"ROWK": k is not None}
    fused._final(fused.n.nucleus_final, m, mb, tail, consts | rowk, warps, fused.narrow)

    def second() -> None:
        seen = fused._new(shard, torch.int32)
        head = (t, lam, seen)
        splits = fused.narrow.splits
        mb = fused._local(fused.s.again_local, shard, head, "again", 0, (splits,),
                          {"SLOTS": slots}, programs=idle_programs(m, splits))  # fmt: skip
        tail = (t, seed, seen, thr, gbest, out, flags, fused.narrow.c)
        fused._final(fused.s.again_final, m, mb, tail, consts, warps, fused.narrow)

    return out, flags, second


__all__ = ["FINAL_WARPS", "sample_topk", "sample_topp", "topp_rounds", "xbits"]
