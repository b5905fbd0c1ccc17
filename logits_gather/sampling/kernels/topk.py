"""Top-k on the fused path, with min-p and top-p over the exact top-k set.

Round 1: :func:`topk_probe` sends each split's greedy key and the largest x of ``G`` column
groups; :func:`topk_reduce` takes the row's greedy key and the bound ``low``, the scores of
the k-th largest group maximum: at or below the row's k-th largest ``s`` when at least
``k`` groups hold a column (``x / T`` is monotone). Round 2 has two writers, back to back:

- :func:`topk_local` (grid ``(M, S)``): a split with at most ``KP`` elements at or above
  ``low`` sends them all; one with more sends nothing and marks itself in ``flags`` with
  the row's epoch (every program stores its flag on every call, so none is stale).
- :func:`topk_overflow`: only the marked splits (rare) send their ``k`` largest (a radix
  select). Inside :func:`topk_local`, never run, this code made it 1.7x slower at M=64.
  Program ``(row, p)`` of ``(M, P)``, ``P <= S``, reads the flags of its share of the
  row's splits at once and serves the marked ones in turn, so the launch is cheap when
  none is marked.

Words per split: ``[tie, floor, KP candidate keys key(s, j)]``. ``tie`` and ``floor`` are
KEY_MIN unless the split left out elements equal to its k-th largest ``v``; then ``floor =
(count left out << 32) | ordered32(v)`` and ``tie`` is the best Gumbel score key among the
split's elements equal to ``v`` (they share one ``s``). :func:`topk_final` polls the
candidates and the heads at once (the heads as their own short vector: 10.8 instead of
11.5 us at M=64 on one H200), and a tie word enters its maximum as one more score.

Why the final kernel knows the kept set exactly: let ``T`` be the row's k-th largest
``s``. A split that sent everything at or above ``low <= T`` sent all its elements at or
above ``T``; a split that sent its k largest sent ``k`` elements ``>= T`` or all of them,
but for left-out elements equal to its ``v <= T``. So the k-th largest candidate is ``T``,
and the row's elements at or above ``T`` are the candidates there plus each split's
left-out count at value ``T``. min-p keeps an upper set of those, and top-p needs only their
masses (``Z``, ``thr``, ``tau`` as :mod:`..reference` defines them). No fallback is needed.
The cut and ``tau`` are searched over radix keys ordered like ``s``
(:func:`.radix.decode_keys`).

A per-row ``k`` (int64 ``[M]``) runs :func:`rowk_local` as round 2's first writer: rows
with ``k`` off (0 or ``>= V``) write the sample format into the first two words per split
and mark no split; :func:`topk_row` (``PLAIN``) reads them as :func:`.waiters.sample_row`
does, so their tokens are the sample path's (min-p's). Rows with ``KMAX < k < V`` get the
token -1, for top-p's in-kernel fallback (:mod:`.topp_exact`), which the caller launches next.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import exchange as ll
from .exchange import gathered, last_arrival, place, row_box, row_target
from .keys import (
    KEY_MIN,
    LOW,
    group_tops_pairs,
    index,
    key,
    key_at,
    ordered32,
    ordered_value,
    radix_bits,
    value,
)
from .noise import divisor, row_key, scale, score_keys, scores, use_greedy
from .radix import (
    decode_keys,
    kth_largest,
    kth_largest_in,
    mass_q,
    mass_threshold,
    row_k,
    tau_level,
    top_select,
)
from .waiters import sample_row
from .writers import full, full_at, load_at, load_row, minp_write, sample_write

KMAX: tl.constexpr = tl.constexpr(64)  # the largest k the candidates serve (MAX_CANDIDATES)


@triton.jit(do_not_specialize=["own", "col0"])
def topk_probe(
    x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, G: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    PAIRS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """Round 1: [greedy key, ``ordered32(x) << 32`` of the largest x of each of ``G``
    column groups]. ``PAIRS``: full splits read bfloat16 pairs (greedy's ``PAIRS``)."""
    ll.enter(PDL)
    probe_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, peers, epoch,
                pstride, relems, own, N, col0, BLOCK, G, WORLD, THREADS, PAIRS)  # fmt: skip


@triton.jit
def probe_write(
    row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, G: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    PAIRS: tl.constexpr,
):  # fmt: skip
    """:func:`topk_probe`'s work for split ``split`` of row ``row``."""
    if PAIRS:
        if full_at(split, N, BLOCK):
            start = split * BLOCK
            tops, best = group_tops_pairs(x_ptr + row * x_stride + start, start + col0, G, BLOCK)
        else:
            tops, best = _group_tops(row, split, x_ptr, x_stride, N, col0, BLOCK, G)
    else:
        tops, best = _group_tops(row, split, x_ptr, x_stride, N, col0, BLOCK, G)
    i = tl.arange(0, THREADS)
    word = tl.gather(tops, tl.minimum(tl.maximum(i // 2 - 1, 0), G - 1), 0).to(tl.int64)
    lanes = tl.where(i % 2 == 0, 0, word)  # low half 0, high half the ordered x
    lanes = ll.lane_word(lanes, 0, best, THREADS)
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_lanes(peers, off, own + split * (1 + G), lanes, 1 + G, ep, WORLD, THREADS)


@triton.jit
def _group_tops(row, split, x_ptr, x_stride, N, col0, BLOCK: tl.constexpr, G: tl.constexpr):
    """:func:`.keys.group_tops_pairs` of any split, from fp32 keys."""
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    h = tl.where(mask, ordered32(x), -0x7FFFFFFF - 1)
    tops = tl.max(tl.reshape(h, [G, BLOCK // G]), 1)
    return tops, key_at(h, gidx, tl.max(tops, 0))[0]


@triton.jit(do_not_specialize=["M", "k"])
def topk_reduce(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, gbest_ptr, low_ptr, C, k,
    CAND: tl.constexpr, G: tl.constexpr, ROWK: tl.constexpr, BITS: tl.constexpr,
    THREADS: tl.constexpr, TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """The row's greedy key and ``low = ordered32(x_b / T)``, ``x_b`` the k-th largest group
    maximum (the lowest int32 when fewer than k groups hold a column). ``BITS`` 16
    (bfloat16): the radix select takes two rounds instead of four."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:
        reduce_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, gbest_ptr,
                   low_ptr, C, k, CAND, G, ROWK, BITS, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def reduce_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, gbest_ptr, low_ptr, C, k,
    CAND: tl.constexpr, G: tl.constexpr, ROWK: tl.constexpr, BITS: tl.constexpr,
    THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`topk_reduce`'s work for one row."""
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox, gx = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, c * (1 + G), ok, THREADS, TRAP
    )
    e = tl.arange(0, CAND * G)  # sent key e: split e // G, group e % G
    at = (e // G) * (1 + G) + 1 + e % G
    sent = ll.wait(rowbox, at, (e // G) < C, ep, timeout_us, status, THREADS, TRAP)
    valid = ((e // G) < C) & (sent != KEY_MIN)
    u = ((sent >> 32).to(tl.int32).to(tl.uint32, bitcast=True)) ^ 0x80000000
    count = tl.sum(valid.to(tl.int32), 0)
    kr = row_k(k, row, ROWK)
    kk = tl.minimum(kr, count)
    uk = kth_largest(u >> (32 - BITS), valid, tl.maximum(kk, 1), BITS) << (32 - BITS)
    if BITS == 16:  # the low half of a negative x's key is all ones (ordered32)
        uk = tl.where(uk < 0x80000000, uk | 0xFFFF, uk)
    xb = ordered_value(uk ^ 0x80000000)
    t = tl.load(t_ptr + row)
    low = ordered32(scale(xb, divisor(t)))
    tl.store(gbest_ptr + row, tl.max(tl.where(ok, gx, KEY_MIN), 0))
    tl.store(low_ptr + row, tl.where(count >= kr, low, -0x7FFFFFFF - 1))
    tl.store(epoch + row, ep)


@triton.jit(do_not_specialize=["k", "own", "col0"])
def probe_one(
    x_ptr, x_stride, t_ptr, gbest_ptr, low_ptr, k, peers, box, epoch, arrivals, pstride,
    relems, own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, G: tl.constexpr,
    ROWK: tl.constexpr, BITS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, TRAP: tl.constexpr, PAIRS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`topk_probe` then :func:`topk_reduce` in one launch."""
    ll.enter(PDL)
    row, split = place()
    probe_write(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0, BLOCK,
                G, WORLD, THREADS, PAIRS)  # fmt: skip
    if last_arrival(arrivals, row):
        reduce_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, gbest_ptr,
                   low_ptr, C, k, CAND, G, ROWK, BITS, THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def topk_local(
    x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, KP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    ll.enter(PDL)
    if full(N, BLOCK):  # see writers.full
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


@triton.jit(do_not_specialize=["own", "V", "col0"])
def rowk_local(
    x_ptr, x_stride, t_ptr, low_ptr, flags, k_ptr, seed_ptr, pos_ptr, mp_ptr, gbest_ptr, peers,
    epoch, pstride, relems, own, V, N, col0, BLOCK: tl.constexpr, KP: tl.constexpr,
    MINP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """Round 2's first writer for a per-row ``k``: the sample format where ``k`` is off,
    :func:`topk_local` elsewhere."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    kr = tl.load(k_ptr + row)
    if (kr == 0) | (kr >= V):
        ep = ll.epoch_of(epoch, row)
        tl.store(flags + row * tl.num_programs(1) + split, -ep)  # nothing to overflow
        F: tl.constexpr = 2 + KP
        if MINP:
            minp_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, mp_ptr, gbest_ptr,
                       peers, epoch, pstride, relems, own, N, col0, BLOCK, WORLD, THREADS,
                       F)  # fmt: skip
        else:
            sample_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch,
                         pstride, relems, own, N, col0, BLOCK, WORLD, THREADS, F)  # fmt: skip
    else:
        topk_local(x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own, N,
                   col0, BLOCK, KP, WORLD, THREADS)  # fmt: skip


@triton.jit(do_not_specialize=["own", "k", "col0"])
def topk_overflow(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, flags, peers, epoch, pstride, relems, own, k, S, N,
    col0, BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    SP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """The marked splits' ``k`` (<= KP) largest; program ``(row, p)`` serves splits ``p, p +
    P, ..`` of the row's ``S`` (``SP >= S``)."""
    ll.enter(PDL)
    overflow_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, t_ptr,
                   seed_ptr, pos_ptr, flags, peers, epoch, pstride, relems, own, k, S, N, col0,
                   BLOCK, KP, BITS, ROWK, SP, WORLD, THREADS)  # fmt: skip


@triton.jit
def overflow_write(
    row, p, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, flags, peers, epoch, pstride, relems, own,
    k, S, N, col0, BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    SP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """:func:`topk_overflow`'s work as program ``(row, p)``."""
    ep, off = row_target(epoch, pstride, relems, row)
    j = tl.arange(0, SP)
    mine = (j < S) & (j % tl.num_programs(1) == p)
    todo = mine & (tl.load(flags + row * S + j, mask=mine, other=0) == ep)
    while tl.max(todo.to(tl.int32), 0) == 1:
        split = tl.min(tl.where(todo, j, SP), 0)
        todo = todo & (j != split)
        _overflow_split(x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, off, ep, own, k, N, col0,
                        row, split, BLOCK, KP, BITS, ROWK, WORLD, THREADS)  # fmt: skip


@triton.jit
def _overflow_split(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, off, ep, own, k, N, col0, row, split,
    BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    t = tl.load(t_ptr + row)
    r = divisor(t)
    s = scale(x, r)
    h = ordered32(s)
    kr = row_k(k, row, ROWK)
    sel, slot, v, overflow = top_select(h, radix_bits(x, BITS), mask, kr, BITS)
    tie = tl.full((), KEY_MIN, tl.int64)
    floor = tl.full((), KEY_MIN, tl.int64)
    if overflow:
        eq = mask & (h == v)
        g = scores(x, r, row_key(seed_ptr, pos_ptr, row), gidx)[1]
        tie = tl.max(tl.where(eq, key(g, gidx), KEY_MIN), 0)
        left = tl.sum((eq & ~sel).to(tl.int32), 0).to(tl.int64)
        floor = (left << 32) | (v.to(tl.int64) & LOW)
    sel = sel & (slot < KP)  # k <= KP: a guard
    base = own + split * (2 + KP)
    ll.put_few(peers, off, base, tie, floor, ep, 2, WORLD, THREADS)
    ll.put(peers, off, base + 2 + slot, key(s, gidx), sel, ep, WORLD)
    j = tl.arange(0, KP)
    count = tl.sum(sel.to(tl.int32), 0)
    ll.put(peers, off, base + 2 + j, tl.full([KP], KEY_MIN, tl.int64), j >= count, ep, WORLD)


@triton.jit(do_not_specialize=["M", "k", "V"])
def topk_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr,
    gbest_ptr, out_ptr, C, k, V, CAND: tl.constexpr, KP: tl.constexpr, TOPP: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr, PLAIN: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """The token of every row: top-k (``k``; ``ROWK``: int64 ``[M]``), then min-p
    (``MINP``) and top-p (``TOPP``; ``p_ptr`` float64 or float32, ``p >= 1`` off)."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr,
                 p_ptr, mp_ptr, gbest_ptr, out_ptr, C, k, V, CAND, KP, TOPP, MINP, ROWK, XBITS,
                 THREADS, TRAP, PLAIN)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def topk_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr,
    gbest_ptr, out_ptr, C, k, V, CAND: tl.constexpr, KP: tl.constexpr, TOPP: tl.constexpr,
    MINP: tl.constexpr, ROWK: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr, PLAIN: tl.constexpr,
):  # fmt: skip
    """:func:`topk_final`'s work for one row."""
    F: tl.constexpr = 2 + KP
    if PLAIN:
        kr = tl.load(k + row)
        if (kr == 0) | (kr >= V):
            sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, out_ptr, C,
                       CAND, THREADS, TRAP, F)  # fmt: skip
        else:
            tok = _topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr,
                            seed_ptr, pos_ptr, p_ptr, mp_ptr, gbest_ptr, C, k, CAND, KP, TOPP, MINP,
                            ROWK, XBITS, THREADS, TRAP)  # fmt: skip
            far = (kr > KMAX) & ~use_greedy(tl.load(t_ptr + row), tl.load(gbest_ptr + row))
            tl.store(out_ptr + row, tl.where(far, -1, tok))  # -1: the fallback's row
    else:
        tok = _topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                        pos_ptr, p_ptr, mp_ptr, gbest_ptr, C, k, CAND, KP, TOPP, MINP, ROWK, XBITS,
                        THREADS, TRAP)  # fmt: skip
        tl.store(out_ptr + row, tok)


@triton.jit
def _topk_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr,
    gbest_ptr, C, k, CAND: tl.constexpr, KP: tl.constexpr, TOPP: tl.constexpr,
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
        sc = score_keys(cand, seed_ptr, pos_ptr, row)
        best = tl.max(tl.where(kept & (h >= lo), sc, KEY_MIN), 0)
        # A split that left out elements equal to its k-th value sent the best score among
        # all of them (they share one s), its tie word: it stands for each, and it is at
        # least the score of any of them among the candidates (a split that left some out
        # sent at least one). fh >= lo implies fh >= cut.
        tied = tl.max(tl.where(left & (fh >= lo), tie, KEY_MIN), 0)
        tok = index(tl.maximum(best, tied))
    tl.store(epoch + row, ep)
    return tok


@triton.jit(do_not_specialize=["k", "own", "col0", "V"])
def topk_one(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, flags, p_ptr, mp_ptr, gbest_ptr, out_ptr, k, peers,
    box, epoch, arrivals, pstride, relems, own, N, col0, status, timeout_us, S, C, V,
    BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    SP: tl.constexpr, TOPP: tl.constexpr, MINP: tl.constexpr, PLAIN: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`topk_overflow` then :func:`topk_final` in one launch."""
    ll.enter(PDL)
    row, p = place()
    overflow_write(row, p, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, flags, peers, epoch, pstride,
                   relems, own, k, S, N, col0, BLOCK, KP, BITS, ROWK, SP, WORLD,
                   THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, pos_ptr,
                 p_ptr, mp_ptr, gbest_ptr, out_ptr, C, k, V, CAND, KP, TOPP, MINP, ROWK, BITS,
                 THREADS, TRAP, PLAIN)  # fmt: skip
