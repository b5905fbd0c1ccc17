"""Top-k on the fused path, with min-p and top-p over the exact top-k set (imported
lazily: needs Triton): round 2's first writer and the final kernel.

Round 1 (:func:`.writers.topk_probe`, :func:`.finals.topk_reduce`) gives every rank the
row's greedy key and a bound ``low`` at or below the row's k-th largest ``s``. Round 2
has two writers, launched back to back:

- :func:`topk_local` (grid ``(M, S)``): a split with at most ``KP`` elements at or
  above ``low`` sends them all; a split with more sends nothing and marks itself in
  ``flags`` with the row's epoch (every program stores its flag on every call, so no
  flag is stale).
- :func:`.overflow.topk_overflow`: only the marked splits (rare), which send their ``k`` largest
  (a radix select). This code lives in its own kernel: inside :func:`topk_local`,
  never run, it made that kernel 1.7x slower at M=64. Its grid
  is ``(M, P)`` with ``P`` at most ``S`` (:func:`.geometry.idle_programs`): each
  program reads the flags of its share of the row's splits at once and serves the
  marked ones in turn, so the launch is cheap when none is marked.

A per-row ``k`` whose rows may turn top-k off runs :func:`.rowk.rowk_local` instead of
:func:`topk_local`, and the final kernel's ``PLAIN`` variant (:mod:`.rowk`).

Words per split: ``[tie, floor, KP candidate keys key(s, j)]``. ``tie`` and ``floor``
are KEY_MIN unless the split left out elements equal to its k-th largest ``v``; then
``floor = (count left out << 32) | ordered32(v)`` and ``tie`` is the best Gumbel
score key among all of the split's elements equal to ``v`` (they share one ``s``).
The final kernel polls the candidates and the heads at once (the heads as their own
short vector, not one copy per candidate lane: 10.8 instead of 11.5 us at M=64 on one
H200, one rank), and a tie word enters its maximum as one more score: it is at least
the score of any of the split's candidates at ``v``, since such a split sent at least
one.

Why the final kernel knows the kept set exactly: let ``T`` be the row's k-th largest
``s``. A split that sent everything at or above ``low <= T`` sent all its elements at or
above ``T``; a split that sent its k largest either sent ``k`` elements ``>= T`` or all
of its elements ``>= T``, but for left-out elements equal to its ``v <= T``. So the
k-th largest candidate is ``T`` (the cut), and the row's elements at or above ``T``
are the candidates there plus, for each split whose ``v`` equals ``T``, its left-out
count at value ``T``. min-p then keeps an upper set of those, and top-p needs only
their masses: ``Z``, ``thr`` and ``tau`` are computed as :mod:`.reference` defines
them (``tau`` by bisection), and the token is the best score among the kept elements
at or above ``tau``. No fallback is needed.

The cut and ``tau`` are searched over radix keys ordered like ``s``
(:func:`.masses.decode_keys`): for bfloat16 inputs, 16-bit keys of ``x`` recovered from
``s`` (two radix rounds instead of four, at most 16 bisection steps instead of about
25), checked per row; else ``ordered32(s)``'s 32 bits.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .finals import row_box, row_k, sample_row, use_greedy
from .keys import (
    KEY_MIN,
    LOW,
    divisor,
    index,
    key,
    kth_largest_in,
    ordered32,
    ordered_value,
    scale,
    value,
)
from .masses import decode_keys, mass_q, mass_threshold, score_keys, tau_level
from .writers import full, load_row, row_target


@triton.jit(do_not_specialize=["own", "col0"])
def topk_local(
    x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, KP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    if full(N, BLOCK):  # see kernels.full: 36 instead of 40 instructions per element
        _topk_local(x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own,
                    N, col0, BLOCK, KP, WORLD, THREADS, True)  # fmt: skip
    else:
        _topk_local(x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own,
                    N, col0, BLOCK, KP, WORLD, THREADS, False)  # fmt: skip


@triton.jit
def _topk_local(
    x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, KP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    FULL: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_row(x_ptr, x_stride, N, col0, BLOCK, FULL)
    t = tl.load(t_ptr + row)
    r = divisor(t)
    s = scale(x, r)
    sel = mask & (ordered32(s) >= tl.load(low_ptr + row))
    slot = tl.cumsum(sel.to(tl.int32), 0) - 1
    count = tl.sum(sel.to(tl.int32), 0)
    fits = count <= KP
    ep, off = row_target(epoch, pstride, relems, row)
    split = tl.program_id(1)
    tl.store(flags + row * tl.num_programs(1) + split, tl.where(fits, -ep, ep))
    base = own + split * (2 + KP)
    heads = tl.where(fits, 2, 0)  # tie and floor: KEY_MIN (lanes_init's words)
    ll.put_lanes(peers, off, base, ll.lanes_init(THREADS), heads, ep, WORLD, THREADS)
    ll.put(peers, off, base + 2 + slot, key(s, gidx), sel & fits, ep, WORLD)
    j = tl.arange(0, KP)
    empty = (j >= count) & fits
    ll.put(peers, off, base + 2 + j, tl.full([KP], KEY_MIN, tl.int64), empty, ep, WORLD)


@triton.jit(do_not_specialize=["M", "k", "V"])
def topk_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, p_ptr, mp_ptr,
    gbest_ptr, out_ptr, C, k, V, CAND: tl.constexpr, KP: tl.constexpr, TOPP: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr, PLAIN: tl.constexpr,
):  # fmt: skip
    """The token of every row: top-k (``k``; with ``ROWK`` an int64 ``[M]`` tensor), then
    min-p (``MINP``: ``mp_ptr`` fp32) and top-p (``TOPP``: ``p_ptr`` float64 or float32, rows
    with ``p >= 1`` off). ``PLAIN`` (with ``ROWK``): rows whose ``k`` is 0 or ``>= V`` are
    in the sample format (:mod:`.rowk`)."""
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, p_ptr,
                 mp_ptr, gbest_ptr, out_ptr, C, k, V, CAND, KP, TOPP, MINP, ROWK, XBITS,
                 THREADS, TRAP, PLAIN)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def topk_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, p_ptr, mp_ptr,
    gbest_ptr, out_ptr, C, k, V, CAND: tl.constexpr, KP: tl.constexpr, TOPP: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr, PLAIN: tl.constexpr,
):  # fmt: skip
    """:func:`topk_final`'s work for one row (also :mod:`.single`'s)."""
    F: tl.constexpr = 2 + KP
    if PLAIN:
        kr = tl.load(k + row)
        if (kr == 0) | (kr >= V):
            sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                       out_ptr, C, CAND, THREADS, TRAP, F)  # fmt: skip
        else:
            _topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                      p_ptr, mp_ptr, gbest_ptr, out_ptr, C, k, CAND, KP, TOPP, MINP, ROWK,
                      XBITS, THREADS, TRAP)  # fmt: skip
    else:
        _topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, p_ptr,
                  mp_ptr, gbest_ptr, out_ptr, C, k, CAND, KP, TOPP, MINP, ROWK, XBITS,
                  THREADS, TRAP)  # fmt: skip


@triton.jit
def _topk_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, p_ptr, mp_ptr,
    gbest_ptr, out_ptr, C, k, CAND: tl.constexpr, KP: tl.constexpr, TOPP: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    F: tl.constexpr = 2 + KP
    ep, rowbox = row_box(box, epoch, pstride, relems, row)
    e = tl.arange(0, CAND * KP)  # candidate e: split e // KP, slot e % KP (1-D throughout)
    on = (e // KP) < C
    # One poll for the candidates and the heads: lanes 2q and 2q + 1 of the second set
    # hold split q's tie and floor words, so the heads are [CAND * KP / 2] (split q < C).
    cand, heads = ll.wait2(rowbox, (e // KP) * F + 2 + e % KP, (e // 2) * F + e % 2, on,
                           (e // 2) < C, ep, timeout_us, status, THREADS, TRAP)  # fmt: skip
    tie, floor = tl.split(tl.reshape(heads, [CAND * KP // 2, 2]))
    gbest = tl.load(gbest_ptr + row)
    t = tl.load(t_ptr + row)
    tok = index(gbest)
    if not use_greedy(t, gbest):
        valid = on & (cand != KEY_MIN)
        s, h, u, nbytes = decode_keys(cand, t, valid, XBITS)
        kk = tl.maximum(tl.minimum(row_k(k, row, ROWK), tl.sum(valid.to(tl.int32), 0)), 1)
        # The k-th largest u (a radix select) holds the k-th largest s.
        uk = kth_largest_in(u, valid, kk, nbytes)
        cut = tl.max(tl.where(valid & (u == uk), h, -0x7FFFFFFF - 1), 0)
        # Splits that left out elements equal to their k-th value, at h level fh.
        left = (tl.arange(0, CAND * KP // 2) < C) & (tie != KEY_MIN)
        fh = (floor & LOW).to(tl.int32).to(tl.int64)
        kept = valid & (h >= cut)
        lo = cut
        smax = scale(value(gbest), divisor(t))
        vcut = ordered_value(cut.to(tl.int32))
        if MINP:
            thr_mp = smax + tl.log(tl.load(mp_ptr + row))
            kept = kept & (s >= thr_mp)
            left = left & (ordered_value(fh.to(tl.int32)) >= thr_mp)
        if TOPP:
            p = tl.load(p_ptr + row).to(tl.float64)  # float32 or float64
            if p < 1.0:
                q = tl.where(kept, mass_q(s, smax), 0)
                # The left-out elements at the cut.
                n = tl.sum(tl.where(left & (fh == cut), floor >> 32, 0), 0)
                thr = mass_threshold(tl.sum(q, 0) + n * mass_q(vcut, smax), p)
                # The mass at or above the cut is all of it; above the largest, none.
                hi = tl.max(tl.where(kept, u, uk), 0) + 1
                lo = tau_level(u, h, q, kept, uk, hi, thr, cut)
        sc = score_keys(cand, seed_ptr, row)
        best = tl.max(tl.where(kept & (h >= lo), sc, KEY_MIN), 0)
        # A split that left out elements equal to its k-th value sent the best score among
        # all of them (they share one s), its tie word: it stands for each, and it is at
        # least the score of any of them among the candidates (a split that left some out
        # sent at least one). fh >= lo implies fh >= cut.
        tied = tl.max(tl.where(left & (fh >= lo), tie, KEY_MIN), 0)
        tok = index(tl.maximum(best, tied))
    tl.store(out_ptr + row, tok)
    tl.store(epoch + row, ep)
