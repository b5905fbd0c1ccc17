"""Triton kernels that wait: the final kernel of every fused operation (and the reduce
between two rounds), one CTA per row (a bounded grid loops over rows).

Each waits in :func:`.ll.wait` until all ``W * S`` splits of its row carry the
row's next epoch, reduces them, writes the answer and stores the epoch. Word
layouts are in :mod:`.writers`.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import ll
from .keys import KEY_MIN, divisor, index, kth_largest, ordered32, ordered_value, scale, value
from .writers import row_target


@triton.jit
def gathered(
    box, epoch, pstride, relems, status, timeout_us, row, idx, mask,
    THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """(epoch, row pointer, words): ``row`` of the mailbox once every word in ``idx`` is
    in. Final kernels loop over rows (``M`` rows, grid ``<= M``): a bounded grid keeps
    ranks that share a GPU from filling it with waiting CTAs (see :mod:`.rounds`)."""
    ep, rowbox = row_box(box, epoch, pstride, relems, row)
    words = ll.wait(rowbox, idx, mask, ep, timeout_us, status, THREADS, TRAP)
    return ep, rowbox, words


@triton.jit
def row_box(box, epoch, pstride, relems, row):
    """(epoch, row pointer) of ``row`` of the mailbox, for the caller's own waits."""
    ep, off = row_target(epoch, pstride, relems, row)
    return ep, box + off


@triton.jit(do_not_specialize=["M"])
def greedy_final(
    box, epoch, pstride, relems, status, timeout_us, M, out_ptr, C,
    CAND: tl.constexpr, KEY: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """The row's greedy token, or with ``KEY`` its greedy key (min-p's first round, for
    :func:`.writers.minp_local`)."""
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        greedy_row(box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C, CAND, KEY,
                   THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def greedy_row(
    box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C,
    CAND: tl.constexpr, KEY: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`greedy_final`'s work for one row (also :mod:`.single`'s)."""
    i = tl.arange(0, CAND)
    ep, _, g = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, i, i < C, THREADS, TRAP
    )
    best = tl.max(tl.where(i < C, g, KEY_MIN), 0)
    if KEY:
        tl.store(out_ptr + row, best)
    else:
        tl.store(out_ptr + row, index(best))
    tl.store(epoch + row, ep)


@triton.jit
def row_k(k, row, ROWK: tl.constexpr):
    """``k``, or with ``ROWK`` row ``row`` of the int64 tensor ``k`` clamped to 1..64 (the
    caller replaces the tokens of rows outside that range)."""
    if ROWK:
        return tl.minimum(tl.maximum(tl.load(k + row), 1), 64)
    else:
        return k


@triton.jit(do_not_specialize=["M", "k"])
def topk_reduce(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, gbest_ptr, low_ptr, C, k,
    CAND: tl.constexpr, G: tl.constexpr, ROWK: tl.constexpr, BITS: tl.constexpr,
    THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """Top-k, between the rounds: the row's greedy key and the bound, ``ordered32`` of
    ``x_b / T`` where ``x_b`` is the k-th largest group maximum of x; the lowest int32
    when fewer than k groups hold a column (no bound: every element is a candidate).
    ``BITS`` 16 (bfloat16 inputs): the radix select runs over the top 16 bits of the
    keys, which order bfloat16 values exactly (two rounds instead of four)."""
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
    """:func:`topk_reduce`'s work for one row (also :mod:`.single`'s)."""
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


@triton.jit
def use_greedy(t, gbest):
    smax = scale(value(gbest), divisor(t))
    return (t == 0.0) | (smax != smax) | (tl.abs(smax) == float("inf"))


@triton.jit(do_not_specialize=["M"])
def sample_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, out_ptr, C,
    CAND: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """``C`` splits (all ranks) in the sample format (top-k's final is in :mod:`.topk`)."""
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                   out_ptr, C, CAND, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def sample_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, out_ptr, C,
    CAND: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr, F: tl.constexpr = 2,
):  # fmt: skip
    """:func:`sample_final`'s work for one row (also :mod:`.single`'s), split ``c``'s words
    at ``c * F`` (:mod:`.rowk`: in top-k's layout)."""
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox, w0 = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, c * F, ok, THREADS, TRAP
    )
    w1 = ll.wait(rowbox, c * F + 1, ok, ep, timeout_us, status, THREADS, TRAP)
    gbest = tl.max(tl.where(ok, w0, KEY_MIN), 0)
    sbest = tl.max(tl.where(ok, w1, KEY_MIN), 0)
    t = tl.load(t_ptr + row)
    tok = tl.where(use_greedy(t, gbest), index(gbest), index(sbest))
    tl.store(out_ptr + row, tok)
    tl.store(epoch + row, ep)


@triton.jit(do_not_specialize=["M", "n"])
def logprobs_final(
    box, epoch, pstride, relems, status, timeout_us, M, ids_ptr, lp_ptr, top_ids_ptr,
    top_lp_ptr, S, C, N, W, n, CAND: tl.constexpr, NP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                     top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def logprobs_row(
    box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr, top_ids_ptr,
    top_lp_ptr, S, C, N, W, n, CAND: tl.constexpr, NP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`logprobs_final`'s work for one row (also :mod:`.single`'s)."""
    RW = 1 + S * (1 + NP)  # words per rank
    c = tl.arange(0, CAND)
    ok = c < C
    at = (c // S) * RW + 1 + (c % S) * (1 + NP)
    ep, rowbox = row_box(box, epoch, pstride, relems, row)
    tok = tl.load(ids_ptr + row)
    owner = tl.minimum(tl.maximum(tok // N, 0), W - 1).to(tl.int32)
    # One poll for every word (one memory round trip once they are in, not three in
    # turn): [CAND, J] lanes of the splits' top-n keys (NP > 0), joined with lanes whose
    # column 0 is each split's (max, sum) pair and whose lane (0, 1) is the token's logit
    # (its owner's head word).
    J: tl.constexpr = NP if NP > 1 else 2
    j = tl.arange(0, J)[None, :]
    cc = c[:, None]
    ih = tl.where(j == 0, at[:, None], owner * RW)
    mh = ((j == 0) & ok[:, None]) | ((j == 1) & (cc == 0))
    mk = ok[:, None] & (j < NP)
    keys, heads = tl.split(ll.wait(rowbox, tl.join(at[:, None] + 1 + j, ih), tl.join(mk, mh),
                                   ep, timeout_us, status, THREADS, TRAP))  # fmt: skip
    pairs = tl.sum(tl.where(j == 0, heads, 0), 1)
    tw = tl.sum(tl.sum(tl.where((j == 1) & (cc == 0), heads, 0), 1), 0)
    maxima = (pairs & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    maxima = tl.where(ok, maxima, float("-inf"))
    sums = tl.where(ok, (pairs >> 32).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    big = tl.max(maxima, 0)
    # tl.max skips NaN; a NaN logit makes its split's sum NaN, and so the result.
    total = tl.sum(tl.where(ok, sums * libdevice.exp(maxima - big), 0.0), 0)
    lse = libdevice.log(total)
    logit = tw.to(tl.int32).to(tl.float32, bitcast=True)
    tl.store(lp_ptr + row, logit - big - lse)
    if NP > 0:
        keys = tl.where(mk, keys, KEY_MIN)
        r = 0
        while r < n:  # n rounds of "take the largest key"; keys are unique
            best = tl.max(tl.max(keys, 1), 0)
            tl.store(top_ids_ptr + row * n + r, index(best))
            tl.store(top_lp_ptr + row * n + r, value(best) - big - lse)
            keys = tl.where(keys == best, KEY_MIN, keys)
            r += 1
    tl.store(epoch + row, ep)
