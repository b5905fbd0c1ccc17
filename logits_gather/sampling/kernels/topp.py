"""Top-p (with or without min-p, and a per-row top-k) on the fused path.

Round 1, after the greedy round gave every rank ``s_max``: program ``(row, split)`` of
:func:`nucleus_local` computes over the split's kept elements (min-p applied) the masses
``q = floor(exp(s - s_max) * 2**40)`` of :mod:`..reference` and their sum, and sends an
*upper set* of its kept elements as candidates: every kept element with ``s`` above a
level chosen so that at most ``SLOTS`` qualify (levels 0.5 apart in ``s``, 32 of them, the
last open; :func:`_fits`). Words per split::

    [sum of q, w = ordered32(largest s left out) (lowest int32: none), best, SLOTS keys]

``best`` is the best score key over all kept elements, for rows whose ``top_p`` is off.
Candidate keys are ``key(s, j)``; the final kernel recomputes masses and scores from them.

Why it is exact when it decides: let ``B = max(w)``. Every kept element with ``s > B`` is a
candidate, so the candidates' mass at or above any level ``v > B`` is the row's.
:func:`nucleus_final` computes ``Z`` and ``thr`` as the definition does and decides iff
the candidates above ``B`` carry ``thr``: then ``tau`` is above ``B``, found by bisection,
and the kept set ``s >= tau`` is among the candidates, ties included. Otherwise it finds
``lam <= tau``, the largest level at which the candidates' own mass reaches ``thr``.

Round 2 (:func:`again_local`, :func:`again_final`): every split sends ``[count, SLOTS
keys]``, every element with ``ordered32(s) >= lam`` when at most ``SLOTS`` qualify, else
only the count (min-p keeps an upper set, so those are kept). With no overflow the final
kernel has the whole nucleus: ``tau`` by bisection from ``lam``. Else the token stays -1
and ``need`` is set. Rows left at -1 by either round go to the in-kernel exact fallback
(:mod:`.topp_exact`), which starts its search at ``lam`` where round 1 found one. Round 2 runs
only in calls of more than 64 rows (:attr:`..fused.fused.Fused.round_two_rows`).
Rows round 1 decided have ``lam`` DONE and round 2 skips them (no words,
no epoch) on every rank alike; ``lam`` starts DONE (:func:`nucleus_local`), so a harness
that runs writers before earlier waiting kernels (``scripts.support.emulated``'s warm) skips every
row alike. Round 2's split 0 stores the ``lam`` its writers saw, for its final kernel.

A row whose per-row ``top_k`` is on (``0 < k < V``) is decided by :func:`nucleus_k_row`
from round 1's candidates: if at least ``k`` lie above ``B``, the k-th largest of them is
the row's k-th largest kept ``s`` and top-k keeps the candidates at or above it (every
element equal to the cut is above ``B``); if fewer do and no split left anything out, the
candidates are the whole kept set. Otherwise the token is -1 with ``need`` and ``more``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import exchange as ll
from .exchange import gathered, row_box, row_target
from .keys import KEY_MIN, argmax_key, index, key, ordered32, value
from .noise import divisor, row_key, scale, score_keys, scores, use_greedy
from .radix import decode_keys, mass_q, mass_threshold, tau_level
from .writers import full, load_at, load_row

HEAD: tl.constexpr = tl.constexpr(3)  # words before a split's candidate slots
BINS: tl.constexpr = tl.constexpr(32)  # levels of 2 * (s_max - s): 0.5 apart, the last open
DONE: tl.constexpr = tl.constexpr(0x7FFFFFFF)  # lam of a row round 1 decided


@triton.jit
def _fits(level, keep, SLOTS: tl.constexpr):
    """The largest ``L`` in ``0..BINS`` with at most ``SLOTS`` kept elements below level
    ``L``, in six block-wide counts. A 32-bin histogram and prefix sum cost more (M=64,
    one H200: nucleus_local 27.7 us with them, 25.7 with this, 19.9 selecting nothing)."""
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
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr, need_ptr, k_ptr,
    peers, epoch, pstride, relems, own, V, N, col0, BLOCK: tl.constexpr, SLOTS: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """Also resets the call's flags (no fill kernel): ``lam`` to DONE (split 0) and
    ``need``, ``more`` to False (program ``(0, 0)``). ``ROWK``: ``k_ptr`` is a per-row
    ``top_k``; a row with it on sends candidates even where its ``top_p`` is off."""
    ll.enter(PDL)
    if full(N, BLOCK):
        _nucleus_local(x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr,
                       need_ptr, k_ptr, peers, epoch, pstride, relems, own, V, N, col0, BLOCK,
                       SLOTS, MINP, ROWK, WORLD, THREADS, True)  # fmt: skip
    else:
        _nucleus_local(x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr,
                       need_ptr, k_ptr, peers, epoch, pstride, relems, own, V, N, col0, BLOCK,
                       SLOTS, MINP, ROWK, WORLD, THREADS, False)  # fmt: skip


@triton.jit
def _nucleus_local(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, gbest_ptr, lam_ptr, need_ptr, k_ptr,
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
        g = scores(x, r, row_key(seed_ptr, pos_ptr, row), gidx)[1]
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
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, pos_ptr, p_ptr, gbest_ptr,
    out_ptr, need_ptr, lam_ptr, thr_ptr, C, k_ptr, V, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, ROWK: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """The token of every decided row, and ``lam`` = DONE; for the others, -1 and round
    2's ``lam`` and ``thr``, or ``need``; for either, ``more`` (``need_ptr + 1``): the
    caller may skip round 2 without it. ``ROWK``: rows with ``top_k`` on take
    :func:`nucleus_k_row`."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        _nucleus_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr,
                     p_ptr, gbest_ptr, out_ptr, need_ptr, lam_ptr, thr_ptr, C, k_ptr, V, CAND,
                     SLOTS, LANES, XBITS, ROWK, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _nucleus_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr, p_ptr,
    gbest_ptr, out_ptr, need_ptr, lam_ptr, thr_ptr, C, k_ptr, V, CAND: tl.constexpr,
    SLOTS: tl.constexpr, LANES: tl.constexpr, XBITS: tl.constexpr, ROWK: tl.constexpr,
    THREADS: tl.constexpr, TRAP: tl.constexpr,
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
        if ROWK:  # a per-row k: rows with it on (0 < k < V) take nucleus_k_row
            kr = tl.load(k_ptr + row)
            if (kr > 0) & (kr < V):
                tok = nucleus_k_row(cand, on, w, ok, gbest, t, p, kr, seed_ptr, pos_ptr, row,
                                    need_ptr, XBITS)  # fmt: skip
            else:
                tok, lam, thr = _topp_row(cand, on, z, w, best, ok, gbest, t, p, seed_ptr,
                                          pos_ptr, row, need_ptr, XBITS)  # fmt: skip
        else:
            tok, lam, thr = _topp_row(cand, on, z, w, best, ok, gbest, t, p, seed_ptr, pos_ptr, row,
                                      need_ptr, XBITS)  # fmt: skip
    tl.store(lam_ptr + row, lam)
    tl.store(thr_ptr + row, thr)
    tl.store(out_ptr + row, tok)
    tl.store(epoch + row, ep)


@triton.jit
def _topp_row(
    cand, on, z, w, best, ok, gbest, t, p, seed_ptr, pos_ptr, row, need_ptr, XBITS: tl.constexpr
):
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
            sc = score_keys(cand, seed_ptr, pos_ptr, row)
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


@triton.jit
def nucleus_k_row(
    cand, on, w, ok, gbest, t, p, k, seed_ptr, pos_ptr, row, need_ptr, XBITS: tl.constexpr
):
    """The token of a row whose ``top_k`` is on (``0 < k < V``) from top-p's round-1 words
    (``cand`` its candidate keys on the ``on`` lanes, ``w`` each ``ok`` split's largest
    ``s`` left out; ``p`` float64, 1 for off), or -1 with ``need`` and ``more`` set."""
    none = -0x7FFFFFFF - 1
    bound = tl.max(tl.where(ok, w, none), 0)
    valid = on & (cand != KEY_MIN)
    s, h, u, _ = decode_keys(cand, t, valid, XBITS)
    above = valid & (h > bound)  # every kept element with s > B
    n = tl.sum(above.to(tl.int64), 0)
    tok = tl.full((), -1, tl.int64)
    if (n >= k) | (bound == none):
        lo = tl.min(tl.where(above, u, 1 << 32), 0)
        hi = tl.max(tl.where(above, u, 0), 0) + 1
        kth = tau_level(u, h, above.to(tl.int64), above, lo, hi, tl.minimum(k, n), none)
        top = above & (h >= kth)  # the kept set after top-k, ties at the cut included
        tau = kth
        if p < 1.0:
            q = tl.where(top, mass_q(s, scale(value(gbest), divisor(t))), 0)
            lo = tl.min(tl.where(top, u, 1 << 32), 0)
            hi = tl.max(tl.where(top, u, 0), 0) + 1
            tau = tau_level(u, h, q, top, lo, hi, mass_threshold(tl.sum(q, 0), p), none)
        sc = score_keys(cand, seed_ptr, pos_ptr, row)
        tok = index(tl.max(tl.where(top & (h >= tau), sc, KEY_MIN), 0))
    else:
        tl.store(need_ptr, 1)
        tl.store(need_ptr + 1, 1)
    return tok


@triton.jit(do_not_specialize=["own", "col0"])
def again_local(
    x_ptr, x_stride, t_ptr, lam_ptr, seen_ptr, peers, epoch, pstride, relems, own, S, N, col0,
    BLOCK: tl.constexpr, SLOTS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """Program ``(row, p)`` of ``(M, P)`` serves the row's splits ``p, p + P, ..`` (``S``
    of them) in turn: the launch costs little when no row needs it (every top-p call)."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    lam = tl.load(lam_ptr + row)
    if tl.program_id(1) == 0:
        tl.store(seen_ptr + row, lam)  # what the writers saw, for the final kernel
    if lam != DONE:
        ep, off = row_target(epoch, pstride, relems, row)
        t = tl.load(t_ptr + row)
        split = tl.program_id(1)
        while split < S:
            _again_split(x_ptr, x_stride, t, lam, peers, off, ep, own, N, col0, row, split,
                         BLOCK, SLOTS, WORLD, THREADS)  # fmt: skip
            split += tl.num_programs(1)


@triton.jit
def _again_split(
    x_ptr, x_stride, t, lam, peers, off, ep, own, N, col0, row, split, BLOCK: tl.constexpr,
    SLOTS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    s = scale(x, divisor(t))
    sel = mask & (ordered32(s) >= lam)
    slot = tl.cumsum(sel.to(tl.int32), 0) - 1
    count = tl.sum(sel.to(tl.int32), 0)
    fits = count <= SLOTS
    base = own + split * (1 + SLOTS)
    ll.put_few(peers, off, base, count.to(tl.int64), 0, ep, 1, WORLD, THREADS)
    ll.put(peers, off, base + 1 + slot, key(s, gidx), sel & fits, ep, WORLD)
    j = tl.arange(0, 64)
    empty = ((j >= count) | ~fits) & (j < SLOTS)
    ll.put(peers, off, base + 1 + j, tl.full([64], KEY_MIN, tl.int64), empty, ep, WORLD)


@triton.jit(do_not_specialize=["M"])
def again_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, pos_ptr, seen_ptr, thr_ptr,
    gbest_ptr, out_ptr, need_ptr, C, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """The token of every row round 1 left to this round; -1 and ``need`` set where a
    split had more than ``SLOTS`` elements at or above ``lam``."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        lam = tl.load(seen_ptr + row)
        if lam != DONE:
            _again_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                       pos_ptr, thr_ptr, gbest_ptr, out_ptr, need_ptr, C, CAND, SLOTS, LANES, XBITS,
                       THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _again_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr, thr_ptr,
    gbest_ptr, out_ptr, need_ptr, C, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    F: tl.constexpr = 1 + SLOTS
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox, count = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, c * F, ok, THREADS, TRAP
    )
    e = tl.arange(0, LANES)  # candidate e: split e // SLOTS, slot e % SLOTS
    on = (e // SLOTS) < C
    cand = ll.wait(rowbox, (e // SLOTS) * F + 1 + e % SLOTS, on, ep, timeout_us, status,
                   THREADS, TRAP)  # fmt: skip
    if tl.max(tl.where(ok, count, 0), 0) <= SLOTS:
        valid = on & (cand != KEY_MIN)
        t = tl.load(t_ptr + row)
        s, h, u, _ = decode_keys(cand, t, valid, XBITS)
        smax = scale(value(tl.load(gbest_ptr + row)), divisor(t))
        q = tl.where(valid, mass_q(s, smax), 0)
        # Every element at or above lam is here, and their mass reaches thr.
        lo = tl.min(tl.where(valid, u, 1 << 32), 0)
        hi = tl.max(tl.where(valid, u, 0), 0) + 1
        tau = tau_level(u, h, q, valid, lo, hi, tl.load(thr_ptr + row), -0x7FFFFFFF - 1)
        sc = score_keys(cand, seed_ptr, pos_ptr, row)
        tl.store(out_ptr + row, index(tl.max(tl.where(valid & (h >= tau), sc, KEY_MIN), 0)))
    else:
        tl.store(need_ptr, 1)
    tl.store(epoch + row, ep)
