"""The fused kernels' writers of greedy, sampling, min-p and logprobs.

Program ``(row, split)`` of a ``*_local`` kernel reads ``BLOCK`` columns of its row once,
keeps them in registers and stores ``F`` words into every rank's mailbox (:mod:`.exchange`) at
``OWN + HEAD + split * F ..``, ``OWN`` this rank's part of the row. Each ``*_write`` is one
program's work, shared with the one-launch kernels (:mod:`.waiters`). Words per split:

==============  ==========================================  ======  ====
kernel          words per split                             ``F``   HEAD
==============  ==========================================  ======  ====
greedy_local    key(x max)                                  1       0
sample_local    key(x max), key(best g)                     2       0
minp_local      global key(x max), key(best g among kept)   2       0
logprobs_local  (max, sum exp) fp32 pair, top_n keys (x, j) 1 + NP  1
==============  ==========================================  ======  ====

logprobs' head word is the token's logit, stored by split 0 of each rank. Top-k's and
top-p's layouts are in :mod:`.topk` and :mod:`.topp`.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import exchange as ll
from .exchange import row_target
from .keys import (
    argmax_key,
    best_key,
    best_key16,
    best_key_pairs,
    key16,
    key_at,
    max_or_nan,
    ordered,
    ordered32,
    value,
    word16,
)
from .noise import divisor, row_key, scale, scores


@triton.jit
def full(N, BLOCK: tl.constexpr):
    """Whether this program's split has ``BLOCK`` columns. Writers specialise on it
    (``FULL``): sm_90 SASS per element 101 -> 96 in sample_local, 176 -> 170 nucleus_local,
    40 -> 36 topk_local (11.9 -> 11.6 us at M=64, one H200), 27 -> 24 logprobs_local. Both
    calls in one ``tl.static_range(2)`` loop compiled otherwise: logprobs_local spilled."""
    return full_at(tl.program_id(1), N, BLOCK)


@triton.jit
def full_at(split, N, BLOCK: tl.constexpr):
    """:func:`full` of split ``split``."""
    return (split + 1) * BLOCK <= N


@triton.jit
def load_row(x_ptr, x_stride, N, col0, BLOCK: tl.constexpr, FULL: tl.constexpr = False):
    """(row, columns, mask, x as fp32, global columns) of program ``(row, split)``;
    columns are int32. ``FULL``: :func:`full` holds (the mask is all true)."""
    return load_at(x_ptr, x_stride, N, col0, tl.program_id(0).to(tl.int64),
                    tl.program_id(1), BLOCK, FULL)  # fmt: skip


@triton.jit
def load_at(x_ptr, x_stride, N, col0, row, split, BLOCK: tl.constexpr, FULL: tl.constexpr = False):
    """:func:`load_row` of split ``split`` of row ``row`` (int64)."""
    cols = split * BLOCK + tl.arange(0, BLOCK)
    if FULL:
        mask = tl.full([BLOCK], 1, tl.int1)
        x = tl.load(x_ptr + row * x_stride + cols).to(tl.float32)
    else:
        mask = cols < N
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=float("-inf"))
        x = x.to(tl.float32)
    return row, cols, mask, x, cols + col0


@triton.jit(do_not_specialize=["own", "col0"])
def greedy_local(
    x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, XBITS: tl.constexpr,
    PAIRS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    ll.enter(PDL)
    greedy_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, peers,
                 epoch, pstride, relems, own, N, col0, BLOCK, WORLD, THREADS, XBITS,
                 PAIRS)  # fmt: skip


@triton.jit
def greedy_write(
    row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, XBITS: tl.constexpr,
    PAIRS: tl.constexpr,
):  # fmt: skip
    """:func:`greedy_local`'s work for split ``split`` of row ``row`` (int64), a full split
    or a row's last."""
    if full_at(split, N, BLOCK):
        _greedy_local(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                      BLOCK, WORLD, THREADS, True, XBITS, PAIRS)  # fmt: skip
    else:
        _greedy_local(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                      BLOCK, WORLD, THREADS, False, XBITS, False)  # fmt: skip


@triton.jit
def _greedy_local(
    row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, FULL: tl.constexpr,
    XBITS: tl.constexpr, PAIRS: tl.constexpr,
):  # fmt: skip
    """The row's epoch is loaded before the split: its load then overlaps the split's.
    ``XBITS`` 16: bfloat16 inputs (:func:`.keys.best_key16`); ``PAIRS``: a full split of
    bfloat16 rows that start 4-byte aligned, read as bfloat16 pairs
    (:func:`.keys.best_key_pairs`)."""
    ep, off = row_target(epoch, pstride, relems, row)
    if PAIRS:
        start = split * BLOCK
        best = best_key_pairs(x_ptr + row * x_stride + start, start + col0, BLOCK)
    else:
        row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK, FULL)
        if XBITS == 16:
            best = best_key16(x, split * BLOCK + col0, mask, BLOCK)
        else:
            best = best_key(x, gidx, mask)
    ll.put_few(peers, off, own + split, best, best, ep, 1, WORLD, THREADS)


@triton.jit(do_not_specialize=["own", "col0"])
def sample_local(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """[greedy word, best score key]. The greedy word is the exact greedy key where the
    row may be greedy (T == 0, NaN or +inf, an overflowing s, all -inf); elsewhere only
    its value part (the split's x max), all that :func:`.noise.use_greedy` reads."""
    ll.enter(PDL)
    sample_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, t_ptr,
                 seed_ptr, pos_ptr, peers, epoch, pstride, relems, own, N, col0, BLOCK, WORLD,
                 THREADS)  # fmt: skip


@triton.jit
def sample_write(
    row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch, pstride, relems, own, N,
    col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, F: tl.constexpr = 2,
):  # fmt: skip
    """:func:`sample_local`'s work for one split, words at ``own + split * F`` (``F`` 2,
    or top-k's ``2 + KP`` in :func:`.topk.rowk_local`)."""
    if full_at(split, N, BLOCK):
        _sample_local(row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch, pstride,
                      relems, own, N, col0, BLOCK, WORLD, THREADS, True, F)  # fmt: skip
    else:
        _sample_local(row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch, pstride,
                      relems, own, N, col0, BLOCK, WORLD, THREADS, False, F)  # fmt: skip


@triton.jit
def _sample_local(
    row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch, pstride, relems, own, N,
    col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, FULL: tl.constexpr,
    F: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK, FULL)
    t = tl.load(t_ptr + row)
    if t == 0.0:  # a greedy row: no noise
        gx = best_key(x, gidx, mask)
        best = gx
    else:
        g = scores(x, divisor(t), row_key(seed_ptr, pos_ptr, row), gidx)[1]
        best = argmax_key(g, gidx, mask)  # NaN only where the row is greedy
        xmax = max_or_nan(x, mask)
        gx = ordered(xmax) << 32
        if (xmax != xmax) | (tl.abs(xmax) == float("inf")) | (value(best) == float("inf")):
            gx = best_key(x, gidx, mask)
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + split * F, gx, best, ep, 2, WORLD, THREADS)


@triton.jit(do_not_specialize=["own", "col0"])
def minp_local(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, mp_ptr, gbest_ptr, peers, epoch, pstride, relems,
    own, N, col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """min-p after :func:`.waiters.greedy_final`: [global greedy key, best score key among
    ``s >= s_max + log(min_p)``] with ``s_max = x_max / T``; the sample format."""
    ll.enter(PDL)
    minp_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, t_ptr,
               seed_ptr, pos_ptr, mp_ptr, gbest_ptr, peers, epoch, pstride, relems, own, N, col0,
               BLOCK, WORLD, THREADS)  # fmt: skip


@triton.jit
def minp_write(
    row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, mp_ptr, gbest_ptr, peers, epoch, pstride,
    relems, own, N, col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    F: tl.constexpr = 2,
):  # fmt: skip
    """:func:`minp_local`'s work for one split, words at ``own + split * F``."""
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    gbest = tl.load(gbest_ptr + row)
    r = divisor(tl.load(t_ptr + row))
    smax = scale(value(gbest), r)
    s, g = scores(x, r, row_key(seed_ptr, pos_ptr, row), gidx)
    keep = mask & (s >= smax + tl.log(tl.load(mp_ptr + row)))  # not s < threshold
    best = argmax_key(g, gidx, keep)  # a NaN s is never kept
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + split * F, gbest, best, ep, 2, WORLD, THREADS)


@triton.jit(do_not_specialize=["own", "n", "col0"])
def logprobs_local(
    x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n, N, col0,
    BLOCK: tl.constexpr, NP: tl.constexpr, XBITS: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """Head word: the token's logit (fp32 bits; NaN where this rank does not own it).
    Split words: (max, sum exp(x - max)) as fp32 bits (low, high), then the ``n``
    largest keys (x, j) in ``NP`` slots."""
    ll.enter(PDL)
    logprobs_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, ids_ptr,
                   peers, epoch, pstride, relems, own, n, N, col0, BLOCK, NP, XBITS, WORLD,
                   THREADS)  # fmt: skip


@triton.jit
def logprobs_write(
    row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n, N, col0,
    BLOCK: tl.constexpr, NP: tl.constexpr, XBITS: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr,
):  # fmt: skip
    """:func:`logprobs_local`'s work for split ``split`` of row ``row``, a full split or a
    row's last."""
    if full_at(split, N, BLOCK):
        _logprobs_local(row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems,
                        own, n, N, col0, BLOCK, NP, XBITS, WORLD, THREADS, True)  # fmt: skip
    else:
        _logprobs_local(row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems,
                        own, n, N, col0, BLOCK, NP, XBITS, WORLD, THREADS, False)  # fmt: skip


@triton.jit
def _logprobs_local(
    row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n, N, col0,
    BLOCK: tl.constexpr, NP: tl.constexpr, XBITS: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr, FULL: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK, FULL)
    m = tl.max(x, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    total = tl.sum(tl.where(mask, libdevice.exp(x - shift), 0.0), 0)
    pair = (total.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (
        m.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    )
    ep, off = row_target(epoch, pstride, relems, row)
    base = own + 1 + split * (1 + NP)
    ll.put_few(peers, off, base, pair, pair, ep, 1, WORLD, THREADS)
    if split == 0:
        local = tl.load(ids_ptr + row) - col0
        mine = (local >= 0) & (local < N)
        v = tl.load(x_ptr + row * x_stride + local, mask=mine, other=float("nan")).to(tl.float32)
        bits = v.to(tl.int32, bitcast=True).to(tl.int64)
        ll.put_few(peers, off, own, bits, bits, ep, 1, WORLD, THREADS)
    if NP > 0:
        lanes = _top_n(x, mask, gidx, split * BLOCK + col0, n, BLOCK, THREADS, XBITS)
        ll.put_lanes(peers, off, base + 1, lanes, NP, ep, WORLD, THREADS)


@triton.jit
def _top_n(x, mask, gidx, start, n, BLOCK: tl.constexpr, THREADS: tl.constexpr,
           XBITS: tl.constexpr):  # fmt: skip
    """Lanes of the ``n`` largest ``key(x, j)`` of the split starting at column ``start``,
    one pass per key. bfloat16 (``XBITS == 16``): a key is one int32 (x's 16-bit key over
    the column offset): one max and one select per element, not a max, a min and two."""
    lanes = ll.lanes_init(THREADS)
    MIN: tl.constexpr = -0x7FFFFFFF - 1
    if XBITS == 16:
        k = key16(x, mask, BLOCK)  # equal iff x equal (bfloat16) and the same column
        q = 0
        while q < n:
            best = tl.max(k, 0)
            lanes = ll.lane_word(lanes, q, word16(best, start), THREADS)
            k = tl.where(k == best, MIN, k)
            q += 1
    else:  # the largest ordered x, then its lowest column
        h = tl.where(mask, ordered32(x), MIN)
        q = 0
        while q < n:
            best, j = key_at(h, gidx, tl.max(h, 0))
            lanes = ll.lane_word(lanes, q, best, THREADS)
            h = tl.where(gidx == j, MIN, h)
            q += 1
    return lanes
