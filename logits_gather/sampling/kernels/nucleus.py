"""Top-p (with or without min-p) on the fused path: candidates that decide the nucleus
exactly, or say that they cannot (imported lazily: needs Triton).

After the greedy round has given every rank the row's greedy key (so ``s_max``), one
more round: program ``(row, split)`` of :func:`nucleus_local` computes, over the
split's kept elements (min-p applied; every element without min-p), the masses
``q = floor(exp(s - s_max) * 2**40)`` of :mod:`.reference` and their sum, and sends
an *upper set* of its kept elements as candidates: every kept element with
``s`` above a level chosen so that at most ``SLOTS`` of them qualify (levels 0.5
apart in ``s``: the integer part of ``2 * (s_max - s)``, 32 of them, the last open;
:func:`_fits` bisects them). Words per split::

    [sum of q, w = ordered32(largest s left out) (lowest int32: none), best, SLOTS keys]

``best`` is the best score key over all kept elements, computed only for rows whose
``top_p`` is off (>= 1: plain or min-p sampling). Candidate keys are ``key(s, j)``;
the final kernel recomputes their masses and Gumbel scores from ``s`` and ``j``
(the same device functions, so the same bits as the local kernel and the torch ops).

Why it is exact when it decides: let ``B = max(w)`` over all splits. Every kept
element with ``s > B`` is a candidate (each split sent all of its elements above its
own ``w``), so the candidates' mass at or above any level ``v > B`` is the row's.
:func:`nucleus_final` computes ``Z`` (the sum of the splits' sums), ``thr`` as the
definition does, and decides iff the candidates above ``B`` carry at least ``thr``:
then ``tau`` (the largest ``s`` whose mass at or above it reaches ``thr``) is above
``B`` and found by bisection over the candidates, and the kept set ``s >= tau`` is
among them, ties included. Otherwise the row goes to a second round (:mod:`.spill`),
which gathers every element at or above a level the candidates prove to be at or
below ``tau``; rows that round cannot decide either get -1 and set ``need``, and the
caller runs the exact torch-ops path (:mod:`.fallback`). Rows that are greedy (``T == 0``,
a non-finite ``s_max``) take the greedy key.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .finals import row_box, use_greedy
from .keys import (
    KEY_MIN,
    argmax_key,
    divisor,
    index,
    key,
    ordered32,
    row_key,
    scale,
    scores,
    value,
)
from .masses import decode_keys, mass_q, mass_threshold, score_keys, tau_level
from .rowk import nucleus_k_row
from .writers import full, load_row, row_target

HEAD: tl.constexpr = tl.constexpr(3)  # words before a split's candidate slots
BINS: tl.constexpr = tl.constexpr(32)  # levels of 2 * (s_max - s): 0.5 apart, the last open
DONE: tl.constexpr = tl.constexpr(0x7FFFFFFF)  # lam of a row round 1 decided


@triton.jit
def _fits(level, keep, SLOTS: tl.constexpr):
    """The largest ``L`` in ``0..BINS`` with at most ``SLOTS`` kept elements below level
    ``L``: a bisection, six block-wide counts. The same answer from a 32-bin
    ``tl.histogram`` and its prefix sum cost more: at M=64 on one H200 nucleus_local
    took 27.7 us with them, 25.7 with this, 19.9 with no selection at all (timing only)."""
    lo = tl.full((), 0, tl.int32)  # no element is below level 0
    hi = tl.full((), BINS + 1, tl.int32)  # above every L
    for _ in tl.static_range(6):  # ceil(log2(BINS + 1)) steps; later ones keep lo
        mid = (lo + hi) // 2
        ok = tl.sum((keep & (level < mid)).to(tl.int32), 0) <= SLOTS
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid)
    return lo


@triton.jit(do_not_specialize=["own", "V", "col0"])
def nucleus_local(
    x_ptr, x_stride, t_ptr, seed_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr, need_ptr, k_ptr,
    peers, epoch, pstride, relems, own, V, N, col0, BLOCK: tl.constexpr, SLOTS: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Also resets the call's flags, so that no fill kernel runs: ``lam`` to DONE (split 0
    of each row; :func:`nucleus_final`, later in stream order, sets it) and both of
    ``need_ptr``'s flags (``need``, ``more``) to False (program ``(0, 0)``). ``ROWK``:
    ``k_ptr`` is a per-row ``top_k`` (int64 ``[M]``), and a row with it on (``0 < k <
    V``) sends candidates even where its ``top_p`` is off (:func:`.rowk.nucleus_k_row`)."""
    if full(N, BLOCK):
        _nucleus_local(x_ptr, x_stride, t_ptr, seed_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr,
                       need_ptr, k_ptr, peers, epoch, pstride, relems, own, V, N, col0, BLOCK,
                       SLOTS, MINP, ROWK, WORLD, THREADS, True)  # fmt: skip
    else:
        _nucleus_local(x_ptr, x_stride, t_ptr, seed_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr,
                       need_ptr, k_ptr, peers, epoch, pstride, relems, own, V, N, col0, BLOCK,
                       SLOTS, MINP, ROWK, WORLD, THREADS, False)  # fmt: skip


@triton.jit
def _nucleus_local(
    x_ptr, x_stride, t_ptr, seed_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr, need_ptr, k_ptr,
    peers, epoch, pstride, relems, own, V, N, col0, BLOCK: tl.constexpr, SLOTS: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    FULL: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_row(x_ptr, x_stride, N, col0, BLOCK, FULL)
    if tl.program_id(1) == 0:
        tl.store(lam_ptr + row, DONE)
        if row == 0:
            tl.store(need_ptr, 0)
            tl.store(need_ptr + 1, 0)
    t = tl.load(t_ptr + row)
    r = divisor(t)
    smax = scale(value(tl.load(gbest_ptr + row)), r)
    s = scale(x, r)
    keep = mask
    if MINP:
        keep = keep & (s >= smax + tl.log(tl.load(mp_ptr + row)))
    q = tl.where(keep, mass_q(s, smax), 0)
    z = tl.sum(q, 0)
    best = tl.full((), KEY_MIN, tl.int64)
    plain = tl.load(p_ptr + row) >= 1.0  # top-p off in this row
    if ROWK:  # and top-k off in it
        kr = tl.load(k_ptr + row)
        plain = plain & ((kr == 0) | (kr >= V))
    if plain:  # every kept element counts
        sel = keep & (cols < 0)
        g = scores(x, r, row_key(seed_ptr, row), gidx)[1]
        best = argmax_key(g, gidx, keep)
    else:
        d = (smax - s) * 2.0  # >= 0 (s_max is the row's largest s)
        level = tl.maximum(tl.where(d < BINS - 1, d, BINS - 1).to(tl.int32), 0)  # NaN: last
        sel = keep & (level < _fits(level, keep, SLOTS))
    slot = tl.cumsum(sel.to(tl.int32), 0) - 1
    sel = sel & (slot < SLOTS)  # never past the split's slots, whatever the inputs
    h = ordered32(s)
    w = tl.max(tl.where(keep & ~sel, h, -0x7FFFFFFF - 1), 0).to(tl.int64)  # after the cap
    ep, off = row_target(epoch, pstride, relems, row)
    base = own + tl.program_id(1) * (HEAD + SLOTS)
    lanes = ll.lane_word(ll.lanes_init(THREADS), 0, z, THREADS)
    lanes = ll.lane_word(ll.lane_word(lanes, 1, w, THREADS), 2, best, THREADS)
    ll.put_lanes(peers, off, base, lanes, HEAD, ep, WORLD, THREADS)
    ll.put(peers, off, base + HEAD + slot, key(s, gidx), sel, ep, WORLD)
    j = tl.arange(0, 64)
    count = tl.sum(sel.to(tl.int32), 0)
    empty = (j >= count) & (j < SLOTS)
    ll.put(peers, off, base + HEAD + j, tl.full([64], KEY_MIN, tl.int64), empty, ep, WORLD)


@triton.jit(do_not_specialize=["M", "V"])
def nucleus_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, p_ptr, gbest_ptr,
    out_ptr, need_ptr, lam_ptr, thr_ptr, C, k_ptr, V, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, ROWK: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    """The token of every decided row, and ``lam`` = DONE; for the others, -1 and the
    second round's level ``lam`` and ``thr`` (:mod:`.spill`), or ``need`` set when the
    candidates' mass never reaches ``thr``; for either, ``more`` (``need_ptr + 1``) set:
    a caller may skip round 2 when it is not (:mod:`.fallback`). ``ROWK``: rows whose
    ``top_k`` (``k_ptr``) is on take :func:`.rowk.nucleus_k_row` instead."""
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        _nucleus_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                     p_ptr, gbest_ptr, out_ptr, need_ptr, lam_ptr, thr_ptr, C, k_ptr, V, CAND,
                     SLOTS, LANES, XBITS, ROWK, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _nucleus_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, p_ptr, gbest_ptr,
    out_ptr, need_ptr, lam_ptr, thr_ptr, C, k_ptr, V, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, ROWK: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    F: tl.constexpr = HEAD + SLOTS
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox = row_box(box, epoch, pstride, relems, row)
    z, w, best = ll.wait3(rowbox, c * F, c * F + 1, c * F + 2, ok, ep, timeout_us, status,
                          THREADS, TRAP)  # fmt: skip
    e = tl.arange(0, LANES)  # candidate e: split e // SLOTS, slot e % SLOTS (LANES >= C * SLOTS)
    on = (e // SLOTS) < C
    cand = ll.wait(rowbox, (e // SLOTS) * F + HEAD + e % SLOTS, on, ep, timeout_us, status,
                   THREADS, TRAP)  # fmt: skip
    gbest = tl.load(gbest_ptr + row)
    t = tl.load(t_ptr + row)
    p = tl.load(p_ptr + row).to(tl.float64)  # float32 or float64
    tok = index(gbest)
    lam = tl.full((), DONE, tl.int32)
    thr = tl.full((), 0, tl.int64)
    if not use_greedy(t, gbest):
        if ROWK:  # a per-row k: rows with it on (0 < k < V) are top-k's (rowk.py)
            kr = tl.load(k_ptr + row)
            if (kr > 0) & (kr < V):
                tok = nucleus_k_row(cand, on, w, ok, gbest, t, p, kr, seed_ptr, row, need_ptr,
                                    XBITS)  # fmt: skip
            else:
                tok, lam, thr = _topp_row(cand, on, z, w, best, ok, gbest, t, p, seed_ptr, row,
                                          need_ptr, XBITS)  # fmt: skip
        else:
            tok, lam, thr = _topp_row(cand, on, z, w, best, ok, gbest, t, p, seed_ptr, row,
                                      need_ptr, XBITS)  # fmt: skip
    tl.store(lam_ptr + row, lam)
    tl.store(thr_ptr + row, thr)
    tl.store(out_ptr + row, tok)
    tl.store(epoch + row, ep)


@triton.jit
def _topp_row(cand, on, z, w, best, ok, gbest, t, p, seed_ptr, row, need_ptr, XBITS: tl.constexpr):
    """``(token, lam, thr)`` of a sampled row from round 1's words (see
    :func:`nucleus_final`)."""
    lam = tl.full((), DONE, tl.int32)
    thr = tl.full((), 0, tl.int64)
    if p >= 1.0:
        tok = index(tl.max(tl.where(ok, best, KEY_MIN), 0))
    else:
        thr = mass_threshold(tl.sum(tl.where(ok, z, 0), 0), p)
        bound = tl.max(tl.where(ok, w, -0x7FFFFFFF - 1), 0)
        valid = on & (cand != KEY_MIN)
        s, h, u, _ = decode_keys(cand, t, valid, XBITS)
        smax = scale(value(gbest), divisor(t))
        above = valid & (h > bound)
        q = tl.where(above, mass_q(s, smax), 0)
        if tl.sum(q, 0) >= thr:
            # The mass at or above lo reaches thr, at or above hi it does not.
            lo = tl.min(tl.where(above, u, 1 << 32), 0)
            hi = tl.max(tl.where(above, u, 0), 0) + 1
            tau = tau_level(u, h, q, above, lo, hi, thr, -0x7FFFFFFF - 1)
            sc = score_keys(cand, seed_ptr, row)
            tok = index(tl.max(tl.where(above & (h >= tau), sc, KEY_MIN), 0))
        else:
            # The candidates' own mass reaches thr from lam up, so tau >= lam: the
            # second round gathers every element at or above it.
            tok = tl.full((), -1, tl.int64)
            tl.store(need_ptr + 1, 1)
            qa = tl.where(valid, mass_q(s, smax), 0)
            if tl.sum(qa, 0) >= thr:
                lo = tl.min(tl.where(valid, u, 1 << 32), 0)
                hi = tl.max(tl.where(valid, u, 0), 0) + 1
                lam = tau_level(u, h, qa, valid, lo, hi, thr, -0x7FFFFFFF - 1).to(tl.int32)
            else:
                tl.store(need_ptr, 1)
    return tok, lam, thr
