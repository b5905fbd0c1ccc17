"""The logprobs writer of the fused path (imported lazily: needs Triton): per split, the
``(max, sum exp)`` pair and the ``top_n`` largest keys, plus the token's logit as the
head word (layouts: :mod:`.writers`)."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import ll
from .keys import KEY_MIN, LOW, key_at, ordered32, radix_bits
from .writers import full_at, load_at, row_target


@triton.jit(do_not_specialize=["own", "n", "col0"])
def logprobs_local(
    x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n, N, col0,
    BLOCK: tl.constexpr, NP: tl.constexpr, XBITS: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr,
):  # fmt: skip
    """Head word: the token's logit (fp32 bits; NaN where this rank does not own it).
    Split words: (max, sum exp(x - max)) as fp32 bits (low, high), then the ``n``
    largest keys (x, j) in ``NP`` slots."""
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
    row's last (also :mod:`.single`'s)."""
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
    """Lanes (:func:`.ll.lanes_init`) of the ``n`` largest keys ``key(x, j)`` of the split
    whose first column is ``start`` (KEY_MIN past its valid elements), one block-wide
    pass per key. ``XBITS == 16`` (bfloat16): a key is one int32, x's 16-bit radix key
    over the column's offset in the split, so each pass is one int32 max and one select
    per element (the general form takes an int32 max, an index min and two selects)."""
    lanes = ll.lanes_init(THREADS)
    MIN: tl.constexpr = -0x7FFFFFFF - 1
    if XBITS == 16:
        off = tl.arange(0, BLOCK)
        u = radix_bits(x, 16).to(tl.int32)  # order-preserving, equal iff x equal (bfloat16)
        k = tl.where(mask, ((u ^ 0x8000) << 16) | (0xFFFF - off), MIN)  # BLOCK <= 2**16
        q = 0
        while q < n:
            best = tl.max(k, 0)
            h = best & -65536  # ordered32(x)'s high half; its low half is all ones for
            h = tl.where(h < 0, h | 0xFFFF, h)  # negative x (bfloat16), else zeros
            j = start + (0xFFFF - (best & 0xFFFF))
            word = (h.to(tl.int64) << 32) | (LOW - j.to(tl.int64))
            lanes = ll.lane_word(lanes, q, tl.where(best == MIN, KEY_MIN, word), THREADS)
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
