"""Triton kernels of the fused sampling path that write (imported lazily: needs Triton).

Every operation is one or two rounds of a ``*_local`` kernel on a ``(M, S)`` grid
followed by a waiting kernel on ``(M,)`` (:mod:`.finals`). Program ``(row, split)``
of a local kernel reads ``BLOCK`` columns of its row once, keeps everything in
registers and stores ``F`` words straight into every rank's mailbox (:mod:`.ll`):
row ``row``, words ``OWN + HEAD + split * F ..`` where ``OWN`` is this rank's part
of the row. Word layouts per split (``HEAD`` words in front):

=================  ==================================================  ========  ====
kernel             words per split                                     ``F``     HEAD
=================  ==================================================  ========  ====
greedy_local       key(x max)                                          1         0
sample_local       key(x max), key(best g)                             2         0
minp_local         global key(x max), key(best g among kept)           2         0
topk_probe         key(x max), key(s max) of each of G column groups   1 + G     0
topk_local         tie word, floor, candidate keys (s, j) in KP slots  2 + KP    0
                   (in :mod:`.topk`, with its overflow kernel)
logprobs_local     (max, sum exp) fp32 pair, top_n keys (x, j)         1 + NP    1
                   (in :mod:`.logprob_writer`)
=================  ==================================================  ========  ====

(logprobs' head word is the token's logit, stored by split 0 of each rank.) Keys,
noise and the top-K selection are in :mod:`.keys`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .keys import (
    argmax_key,
    best_key,
    divisor,
    key_at,
    max_or_nan,
    ordered,
    ordered32,
    row_key,
    scale,
    scores,
    value,
)


@triton.jit
def full(N, BLOCK: tl.constexpr):
    """Whether this program's split has ``BLOCK`` columns (all but a row's last, at most).
    The writers run their body specialised on it (``FULL``): with the mask a constant,
    sm_90 SASS per element went from 101 to 96 instructions in sample_local, 176 to 170
    in nucleus_local, 40 to 36 in topk_local, 27 to 24 in logprobs_local (top-n); topk_local
    took 11.6 instead of 11.9 us at M=64 (one H200). (The two calls written once, in a
    ``tl.static_range(2)`` loop, compiled to other code: logprobs_local spilled.)"""
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


@triton.jit
def row_target(epoch, pstride, relems, row):
    ep = ll.epoch_of(epoch, row)
    return ep, ll.row_offset(pstride, relems, row, ep)


@triton.jit(do_not_specialize=["own", "col0"])
def greedy_local(
    x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    greedy_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, peers,
                 epoch, pstride, relems, own, N, col0, BLOCK, WORLD, THREADS)  # fmt: skip


@triton.jit
def greedy_write(
    row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """:func:`greedy_local`'s work for split ``split`` of row ``row`` (int64), a full split
    or a row's last (also :mod:`.single`'s)."""
    if full_at(split, N, BLOCK):
        _greedy_local(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                      BLOCK, WORLD, THREADS, True)  # fmt: skip
    else:
        _greedy_local(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                      BLOCK, WORLD, THREADS, False)  # fmt: skip


@triton.jit
def _greedy_local(
    row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, FULL: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK, FULL)
    best = best_key(x, gidx, mask)
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + split, best, best, ep, 1, WORLD, THREADS)


@triton.jit(do_not_specialize=["own", "col0"])
def sample_local(
    x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Plain sampling: [greedy word, best score key]. The greedy word is the exact greedy
    key where the row may be greedy (T == 0, a NaN or +inf, an overflowing s, or
    this split all -inf); elsewhere its value part alone (the split's x max) is exact,
    which is all the final kernel reads of it (see :func:`.finals.use_greedy`)."""
    sample_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, t_ptr,
                 seed_ptr, peers, epoch, pstride, relems, own, N, col0, BLOCK, WORLD,
                 THREADS)  # fmt: skip


@triton.jit
def sample_write(
    row, split, x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, F: tl.constexpr = 2,
):  # fmt: skip
    """:func:`sample_local`'s work for split ``split`` of row ``row``, a full split or a
    row's last (also :mod:`.single`'s); its words at ``own + split * F`` (:mod:`.rowk`
    puts them in top-k's layout)."""
    if full_at(split, N, BLOCK):
        _sample_local(row, split, x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride,
                      relems, own, N, col0, BLOCK, WORLD, THREADS, True, F)  # fmt: skip
    else:
        _sample_local(row, split, x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride,
                      relems, own, N, col0, BLOCK, WORLD, THREADS, False, F)  # fmt: skip


@triton.jit
def _sample_local(
    row, split, x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, FULL: tl.constexpr,
    F: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK, FULL)
    t = tl.load(t_ptr + row)
    if t == 0.0:  # a greedy row: no noise
        gx = best_key(x, gidx, mask)
        best = gx
    else:
        g = scores(x, divisor(t), row_key(seed_ptr, row), gidx)[1]
        best = argmax_key(g, gidx, mask)  # NaN only where the row is greedy
        xmax = max_or_nan(x, mask)
        gx = ordered(xmax) << 32
        if (xmax != xmax) | (tl.abs(xmax) == float("inf")) | (value(best) == float("inf")):
            gx = best_key(x, gidx, mask)
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + split * F, gx, best, ep, 2, WORLD, THREADS)


@triton.jit(do_not_specialize=["own", "col0"])
def topk_probe(
    x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, G: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Top-k, round 1: [greedy key, the largest x of each of ``G`` column groups as
    ``ordered32(x) << 32``]. Their k-th largest is at most the row's k-th largest x when
    at least k groups hold a column, and ``x / T`` is monotone, so its scores bound
    the row's k-th largest s from below: round 2's bound (:func:`.finals.topk_reduce`)."""
    probe_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, peers, epoch,
                pstride, relems, own, N, col0, BLOCK, G, WORLD, THREADS)  # fmt: skip


@triton.jit
def probe_write(
    row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
    BLOCK: tl.constexpr, G: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """:func:`topk_probe`'s work for split ``split`` of row ``row`` (also
    :mod:`.single`'s)."""
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    h = tl.where(mask, ordered32(x), -0x7FFFFFFF - 1)
    tops = tl.max(tl.reshape(h, [G, BLOCK // G]), 1)
    i = tl.arange(0, THREADS)
    word = tl.gather(tops, tl.minimum(tl.maximum(i // 2 - 1, 0), G - 1), 0).to(tl.int64)
    lanes = tl.where(i % 2 == 0, 0, word)  # low half 0, high half the ordered x
    lanes = ll.lane_word(lanes, 0, key_at(h, gidx, tl.max(tops, 0))[0], THREADS)
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_lanes(peers, off, own + split * (1 + G), lanes, 1 + G, ep, WORLD, THREADS)


@triton.jit(do_not_specialize=["own", "col0"])
def minp_local(
    x_ptr, x_stride, t_ptr, seed_ptr, mp_ptr, gbest_ptr, peers, epoch, pstride, relems,
    own, N, col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """min-p after :func:`.finals.greedy_final`: [global greedy key, best score key among
    ``s >= s_max + log(min_p)``] with ``s_max = x_max / T``; the sample format."""
    minp_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, t_ptr,
               seed_ptr, mp_ptr, gbest_ptr, peers, epoch, pstride, relems, own, N, col0,
               BLOCK, WORLD, THREADS)  # fmt: skip


@triton.jit
def minp_write(
    row, split, x_ptr, x_stride, t_ptr, seed_ptr, mp_ptr, gbest_ptr, peers, epoch, pstride,
    relems, own, N, col0, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    F: tl.constexpr = 2,
):  # fmt: skip
    """:func:`minp_local`'s work for split ``split`` of row ``row`` (also
    :mod:`.single`'s and :mod:`.rowk`'s), words at ``own + split * F``."""
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    gbest = tl.load(gbest_ptr + row)
    r = divisor(tl.load(t_ptr + row))
    smax = scale(value(gbest), r)
    s, g = scores(x, r, row_key(seed_ptr, row), gidx)
    keep = mask & (s >= smax + tl.log(tl.load(mp_ptr + row)))  # not s < threshold
    best = argmax_key(g, gidx, keep)  # a NaN s is never kept
    ep, off = row_target(epoch, pstride, relems, row)
    ll.put_few(peers, off, own + split * F, gbest, best, ep, 2, WORLD, THREADS)
