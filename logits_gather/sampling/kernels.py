"""Triton kernels of the fused sampling path (imported lazily: needs Triton and a GPU).

Every operation is a ``*_local`` kernel on a ``(M, S)`` grid and a ``*_final``
kernel on ``(M,)``. Program ``(row, split)`` of a local kernel reads ``BLOCK``
columns of its row once, keeps everything in registers and stores ``F`` words
straight into every rank's mailbox (:mod:`.ll`): row ``row``, words
``OWN + HEAD + split * F ..`` where ``OWN`` is this rank's part of the row. The
final kernel's one CTA per row waits for all ``W * S`` splits of its row, reduces
them and writes the answer. Word layouts per split (``HEAD`` words in front):

==============  =====================================================  ==========  ====
operation       words per split                                        ``F``       HEAD
==============  =====================================================  ==========  ====
greedy          key(x max)                                             1           0
sample          key(x max), key(best g)                                2           0
sample top_k    key(x max), key(best g at the k-th s), k keys (s, j)   2 + KP      0
logprobs        (max, sum exp) fp32 pair, top_n keys (x, j)            1 + NP      1
==============  =====================================================  ==========  ====

(logprobs' head word is the token's logit, stored by split 0 of each rank.) Keys,
noise and the top-K selection are in :mod:`.keys`.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import ll
from .keys import (
    KEY_MIN,
    best_key,
    index,
    key,
    kth_largest,
    nlnl,
    ordered32,
    radix_bits,
    row_key,
    scores,
    top_select,
    value,
)


@triton.jit
def noise_kernel(seed_ptr, t_ptr, x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Test helper: ``out[row, j] = x / T - log(-log(u))`` for global columns ``j`` (fp32)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    _, g = scores(x, tl.load(t_ptr + row), row_key(tl.load(seed_ptr + row)), cols)
    tl.store(out_ptr + row * N + cols, g, mask=mask)


@triton.jit
def scores_kernel(x_ptr, x_stride, t_ptr, seed_ptr, s_ptr, g_ptr, N, col0, BLOCK: tl.constexpr):
    """The filter path's elementwise pass: ``s = x / T`` and ``g = s - log(-log(u))``
    (``T`` 0 read as 1), fp32 ``[M, N]`` contiguous outputs, global columns from ``col0``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    s, g = scores(x, tl.load(t_ptr + row), row_key(tl.load(seed_ptr + row)), cols + col0)
    tl.store(s_ptr + row * N + cols, s, mask=mask)
    tl.store(g_ptr + row * N + cols, g, mask=mask)


@triton.jit
def _load_row(x_ptr, x_stride, N, col0, BLOCK: tl.constexpr):
    """(row, columns, mask, x as fp32, global columns); columns are int32."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    return row, cols, mask, x, cols + col0


@triton.jit
def _target(epoch, pstride, relems, row):
    ep = ll.epoch_of(epoch, row)
    return ep, ll.row_offset(pstride, relems, row, ep)


@triton.jit
def greedy_local(
    x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    best = best_key(x, gidx, mask)
    ep, off = _target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + tl.program_id(1), best, best, ep, 1, WORLD, THREADS)


@triton.jit
def sample_local(
    x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Plain sampling: [greedy key, best score key]."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    gx = best_key(x, gidx, mask)
    s, g = scores(x, tl.load(t_ptr + row), row_key(tl.load(seed_ptr + row)), gidx)
    best = best_key(g, gidx, mask)
    ep, off = _target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + tl.program_id(1) * 2, gx, best, ep, 2, WORLD, THREADS)


@triton.jit
def topk_probe(
    x_ptr, x_stride, t_ptr, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, G: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Top-k, round 1: [greedy key, the largest s key of each of ``G`` column groups].
    With ``G * splits >= k`` these are at least k distinct elements, so their k-th
    largest is at most the row's k-th largest s: round 2's lower bound."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    t = tl.load(t_ptr + row)
    s = tl.math.div_rn(x, tl.where(t > 0.0, t, 1.0))
    keys = tl.where(mask, key(s, gidx), KEY_MIN)
    tops = tl.max(tl.reshape(keys, [G, BLOCK // G]), 1)
    i = tl.arange(0, THREADS)
    word = tl.gather(tops, tl.minimum(tl.maximum(i // 2 - 1, 0), G - 1), 0)
    lanes = tl.where(i % 2 == 0, word, word >> 32)
    lanes = ll.lane_word(lanes, 0, best_key(x, gidx, mask), THREADS)
    ep, off = _target(epoch, pstride, relems, row)
    ll.put_lanes(peers, off, own + tl.program_id(1) * (1 + G), lanes, 1 + G, ep, WORLD, THREADS)


@triton.jit
def topk_local(
    x_ptr, x_stride, t_ptr, seed_ptr, low_ptr, peers, epoch, pstride, relems, own, k, N,
    col0, BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr,
):  # fmt: skip
    """Top-k, round 2: [tie word, floor, candidates (s keys) in ``KP`` slots]. The
    candidates are every element with s at or above the row's bound from round 1 when
    they fit, else the split's k largest, found by a radix select: then ``floor`` is
    the k-th largest s (ordered) and the tie word the best score key among the
    elements equal to it when some of those were left out (KEY_MIN otherwise)."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    t = tl.load(t_ptr + row)
    s = tl.math.div_rn(x, tl.where(t > 0.0, t, 1.0))
    h = ordered32(s)
    sel = mask & (h >= tl.load(low_ptr + row))
    tie = tl.full((), KEY_MIN, tl.int64)
    floor = tl.full((), KEY_MIN, tl.int64)
    if tl.sum(sel.to(tl.int32), 0) > KP:  # rare: more candidates than slots
        sel, _, v, overflow = top_select(h, radix_bits(x, BITS), mask, k, BITS)
        floor = v.to(tl.int64)
        if overflow:
            g = scores(x, t, row_key(tl.load(seed_ptr + row)), gidx)[1]
            tie = tl.max(tl.where(mask & (h == v), key(g, gidx), KEY_MIN), 0)
    slot = tl.cumsum(sel.to(tl.int32), 0) - 1
    sel = sel & (slot < KP)  # never write past the split's slots
    ep, off = _target(epoch, pstride, relems, row)
    base = own + tl.program_id(1) * (2 + KP)
    ll.put_few(peers, off, base, tie, floor, ep, 2, WORLD, THREADS)
    ll.put(peers, off, base + 2 + slot, key(s, gidx), sel, ep, WORLD)
    j = tl.arange(0, KP)
    count = tl.sum(sel.to(tl.int32), 0)
    ll.put(peers, off, base + 2 + j, tl.full([KP], KEY_MIN, tl.int64), j >= count, ep, WORLD)


@triton.jit
def minp_local(
    x_ptr, x_stride, t_ptr, seed_ptr, logmp_ptr, gbest_ptr, peers, epoch, pstride, relems,
    own, N, col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """min-p after :func:`minp_reduce`: [global greedy key, best score key among
    ``(s - s_max) >= log(min_p)``] with ``s_max = x_max / T``; the sample format."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    gbest = tl.load(gbest_ptr + row)
    t = tl.load(t_ptr + row)
    smax = tl.math.div_rn(value(gbest), tl.where(t > 0.0, t, 1.0))
    s, g = scores(x, t, row_key(tl.load(seed_ptr + row)), gidx)
    keep = mask & ((s - smax) >= tl.load(logmp_ptr + row))
    best = best_key(g, gidx, keep)
    ep, off = _target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + tl.program_id(1) * 2, gbest, best, ep, 2, WORLD, THREADS)


@triton.jit
def _gathered(
    box, epoch, pstride, relems, status, timeout_us, row, idx, mask,
    THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """(epoch, row pointer, words): ``row`` of the mailbox once every word in ``idx`` is
    in. Final kernels loop over rows (``M`` rows, grid ``<= M``): a bounded grid keeps
    ranks that share a GPU from filling it with waiting CTAs (see :mod:`.fused`)."""
    ep, off = _target(epoch, pstride, relems, row)
    words = ll.wait(box + off, idx, mask, ep, timeout_us, status, THREADS, TRAP)
    return ep, box + off, words


@triton.jit
def greedy_final(
    box, epoch, pstride, relems, status, timeout_us, M, out_ptr, C,
    CAND: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    i = tl.arange(0, CAND)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        ep, _, g = _gathered(
            box, epoch, pstride, relems, status, timeout_us, row, i, i < C, THREADS, TRAP
        )
        tl.store(out_ptr + row, index(tl.max(tl.where(i < C, g, KEY_MIN), 0)))
        tl.store(epoch + row, ep)
        row += tl.num_programs(0)


@triton.jit
def minp_reduce(
    box, epoch, pstride, relems, status, timeout_us, M, gbest_ptr, C,
    CAND: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """min-p's first round: the row's greedy key, for :func:`minp_local`."""
    i = tl.arange(0, CAND)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        ep, _, g = _gathered(
            box, epoch, pstride, relems, status, timeout_us, row, i, i < C, THREADS, TRAP
        )
        tl.store(gbest_ptr + row, tl.max(tl.where(i < C, g, KEY_MIN), 0))
        tl.store(epoch + row, ep)
        row += tl.num_programs(0)


@triton.jit
def topk_reduce(
    box, epoch, pstride, relems, status, timeout_us, M, gbest_ptr, low_ptr, C, k,
    CAND: tl.constexpr, G: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """Top-k, between the rounds: the row's greedy key and the bound (ordered s)."""
    c = tl.arange(0, CAND)
    ok = c < C
    row = tl.program_id(0).to(tl.int64)
    while row < M:
        ep, rowbox, gx = _gathered(
            box, epoch, pstride, relems, status, timeout_us, row, c * (1 + G), ok, THREADS, TRAP
        )
        e = tl.arange(0, CAND * G)  # sent key e: split e // G, group e % G
        at = (e // G) * (1 + G) + 1 + e % G
        sent = ll.wait(rowbox, at, (e // G) < C, ep, timeout_us, status, THREADS, TRAP)
        valid = ((e // G) < C) & (sent != KEY_MIN)
        u = ((sent >> 32).to(tl.int32).to(tl.uint32, bitcast=True)) ^ 0x80000000
        kk = tl.minimum(k, tl.sum(valid.to(tl.int32), 0))
        bound = kth_largest(u, valid, tl.maximum(kk, 1), 32) ^ 0x80000000
        tl.store(gbest_ptr + row, tl.max(tl.where(ok, gx, KEY_MIN), 0))
        tl.store(low_ptr + row, bound.to(tl.int32, bitcast=True))
        tl.store(epoch + row, ep)
        row += tl.num_programs(0)


@triton.jit
def _use_greedy(t, gbest):
    smax = tl.math.div_rn(value(gbest), tl.where(t > 0.0, t, 1.0))
    return (t == 0.0) | (smax != smax) | (tl.abs(smax) == float("inf"))


@triton.jit
def sample_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, gbest_ptr, out_ptr,
    C, k, CAND: tl.constexpr, KP: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """``C`` splits (all ranks) in the sample format, or top-k round 2's (``KP > 0``; the
    greedy keys then come from :func:`topk_reduce` in ``gbest_ptr``)."""
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        _sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                    gbest_ptr, out_ptr, C, k, CAND, KP, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _sample_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, gbest_ptr,
    out_ptr, C, k, CAND: tl.constexpr, KP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    F: tl.constexpr = 2 + KP if KP > 0 else 2
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox, w0 = _gathered(
        box, epoch, pstride, relems, status, timeout_us, row, c * F, ok, THREADS, TRAP
    )
    w1 = ll.wait(rowbox, c * F + 1, ok, ep, timeout_us, status, THREADS, TRAP)
    if KP == 0:
        gbest = tl.max(tl.where(ok, w0, KEY_MIN), 0)
        sbest = tl.max(tl.where(ok, w1, KEY_MIN), 0)
    else:
        gbest = tl.load(gbest_ptr + row)
        e = tl.arange(0, CAND * KP)  # candidate e: split e // KP, slot e % KP (1-D throughout)
        on = (e // KP) < C
        head = (e // KP) * F
        cand = ll.wait(rowbox, head + 2 + e % KP, on, ep, timeout_us, status, THREADS, TRAP)
        tie = ll.wait(rowbox, head, on, ep, timeout_us, status, THREADS, TRAP)
        floor = ll.wait(rowbox, head + 1, on, ep, timeout_us, status, THREADS, TRAP)
        valid = on & (cand != KEY_MIN)
        h = cand >> 32
        kk = tl.minimum(k, tl.sum(valid.to(tl.int32), 0))
        u = (h.to(tl.int32).to(tl.uint32, bitcast=True)) ^ 0x80000000
        cut = kth_largest(u, valid, tl.maximum(kk, 1), 32)
        cut = (cut ^ 0x80000000).to(tl.int32, bitcast=True).to(tl.int64)
        col = index(cand)
        rkey = row_key(tl.load(seed_ptr + row))
        sc = key(value(cand) - nlnl(rkey, col), col)
        # A split that left out elements equal to its k-th value sent the best score
        # among all of those (the tie word), which stands for each of them.
        sc = tl.where((h == floor) & (tie != KEY_MIN), tie, sc)
        sbest = tl.max(tl.where(valid & (h >= cut), sc, KEY_MIN), 0)
    t = tl.load(t_ptr + row)
    tok = tl.where(_use_greedy(t, gbest), index(gbest), index(sbest))
    tl.store(out_ptr + row, tok)
    tl.store(epoch + row, ep)


@triton.jit
def logprobs_local(
    x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n, N, col0,
    BLOCK: tl.constexpr, NP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Head word: the token's logit (fp32 bits; NaN where this rank does not own it).
    Split words: (max, sum exp(x - max)) as fp32 bits (low, high), then the ``n``
    largest keys (x, j) in ``NP`` slots."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    split = tl.program_id(1)
    m = tl.max(x, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    total = tl.sum(tl.where(mask, libdevice.exp(x - shift), 0.0), 0)
    pair = (total.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (
        m.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    )
    ep, off = _target(epoch, pstride, relems, row)
    base = own + 1 + split * (1 + NP)
    ll.put_few(peers, off, base, pair, pair, ep, 1, WORLD, THREADS)
    if split == 0:
        local = tl.load(ids_ptr + row) - col0
        mine = (local >= 0) & (local < N)
        v = tl.load(x_ptr + row * x_stride + local, mask=mine, other=float("nan")).to(tl.float32)
        bits = v.to(tl.int32, bitcast=True).to(tl.int64)
        ll.put_few(peers, off, own, bits, bits, ep, 1, WORLD, THREADS)
    if NP > 0:  # the n largest keys, one block-wide max of the 64-bit keys at a time
        lanes = ll.lanes_init(THREADS)
        keys = tl.where(mask, key(x, gidx), KEY_MIN)
        q = 0
        while q < n:
            best = tl.max(keys, 0)
            lanes = ll.lane_word(lanes, q, best, THREADS)
            keys = tl.where(keys == best, KEY_MIN, keys)
            q += 1
        ll.put_lanes(peers, off, base + 1, lanes, NP, ep, WORLD, THREADS)


@triton.jit
def logprobs_final(
    box, epoch, pstride, relems, status, timeout_us, M, ids_ptr, lp_ptr, top_ids_ptr,
    top_lp_ptr, S, C, N, W, n, CAND: tl.constexpr, NP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        _logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                      top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _logprobs_row(
    box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr, top_ids_ptr,
    top_lp_ptr, S, C, N, W, n, CAND: tl.constexpr, NP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    RW = 1 + S * (1 + NP)  # words per rank
    c = tl.arange(0, CAND)
    ok = c < C
    at = (c // S) * RW + 1 + (c % S) * (1 + NP)
    ep, rowbox, pairs = _gathered(
        box, epoch, pstride, relems, status, timeout_us, row, at, ok, THREADS, TRAP
    )
    maxima = (pairs & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    maxima = tl.where(ok, maxima, float("-inf"))
    sums = tl.where(ok, (pairs >> 32).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    big = tl.max(maxima, 0)
    # tl.max skips NaN; a NaN logit makes its split's sum NaN, and so the result.
    total = tl.sum(tl.where(ok, sums * libdevice.exp(maxima - big), 0.0), 0)
    lse = libdevice.log(total)
    tok = tl.load(ids_ptr + row)
    owner = tl.minimum(tl.maximum(tok // N, 0), W - 1)
    two = tl.arange(0, 2)
    tw = ll.wait(rowbox, owner * RW + two * 0, two < 1, ep, timeout_us, status, THREADS, TRAP)
    logit = tl.sum(tl.where(two < 1, tw, 0), 0).to(tl.int32).to(tl.float32, bitcast=True)
    tl.store(lp_ptr + row, logit - big - lse)
    if NP > 0:
        j = tl.arange(0, NP)[None, :]
        keys = ll.wait(rowbox, at[:, None] + 1 + j, ok[:, None], ep, timeout_us, status, THREADS,
                       TRAP)  # fmt: skip
        keys = tl.where(ok[:, None], keys, KEY_MIN)
        r = 0
        while r < n:  # n rounds of "take the largest key"; keys are unique
            best = tl.max(tl.max(keys, 1), 0)
            tl.store(top_ids_ptr + row * n + r, index(best))
            tl.store(top_lp_ptr + row * n + r, value(best) - big - lse)
            keys = tl.where(keys == best, KEY_MIN, keys)
            r += 1
    tl.store(epoch + row, ep)
