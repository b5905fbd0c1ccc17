"""Sort keys of the fused sampling kernels: one int64 per (value, global column).

An fp32 value ``v`` and a global column ``j`` become ``ord(v) * 2**32 + (2**32 - 1 - j)``,
where ``ord`` maps the fp32 bits to an order-preserving signed int (``-0.0`` as ``+0.0``,
every NaN as one NaN above ``+inf``). ``max`` of keys is the largest value, lowest column
on ties (``torch.argmax``'s rule), so maxima compose across splits and ranks, and keys are
unique within a row. Also here: a block's best key read from 16-bit inputs, and from
bfloat16 rows read as pairs of values (two per 32-bit word).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .exchange import HW

KEY_MIN: tl.constexpr = tl.constexpr(-(1 << 63))
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)


@triton.jit
def ordered32(v):
    """fp32 -> an order-preserving int32 image."""
    b = v.to(tl.int32, bitcast=True)
    b = tl.where(v == 0.0, 0, b)
    b = tl.where(v != v, 0x7FC00000, b)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def ordered(v):
    """:func:`ordered32` widened to int64."""
    return ordered32(v).to(tl.int64)


@triton.jit
def key(v, gidx):
    return (ordered(v) << 32) | (LOW - gidx.to(tl.int64))


@triton.jit
def ordered_value(h):
    """The fp32 value of an :func:`ordered32` image (``h`` int32 or uint32 bits)."""
    h = h.to(tl.int32, bitcast=True)
    return tl.where(h < 0, h ^ 0x7FFFFFFF, h).to(tl.float32, bitcast=True)


@triton.jit
def value(k):
    return ordered_value((k >> 32).to(tl.int32))


@triton.jit
def index(k):
    return (k & LOW) ^ LOW  # = LOW - (k & LOW); a tensor first (Triton 3.8 interpreter)


@triton.jit
def key_at(h, gidx, top):
    """``(key, column)`` of the lowest column (``gidx`` int32) whose ``h`` (ordered32, the
    lowest int32 where invalid) is its maximum ``top``; KEY_MIN if none is valid."""
    j = tl.min(tl.where(h == top, gidx, 0x7FFFFFFF), 0)
    k = (top.to(tl.int64) << 32) | (LOW - j.to(tl.int64))
    return tl.where(top == -0x7FFFFFFF - 1, KEY_MIN, k), j


@triton.jit
def best_key(v, gidx, valid):
    """``max(key(v, gidx))`` (``gidx`` int32) over the valid elements (KEY_MIN if none),
    by an int32 max and an index min: cheaper than building and reducing 64-bit keys."""
    h = tl.where(valid, ordered32(v), -0x7FFFFFFF - 1)
    return key_at(h, gidx, tl.max(h, 0))[0]


@triton.jit
def radix_bits(x, BITS: tl.constexpr):
    """The top ``BITS`` bits of ``ordered32(x) + 2**31`` (uint32): order-preserving keys,
    exact at ``BITS = 16`` only for bfloat16 inputs."""
    u = ordered32(x).to(tl.uint32, bitcast=True) ^ 0x80000000
    return u >> (32 - BITS)


@triton.jit
def key16(x, valid, BLOCK: tl.constexpr):
    """Int32 keys of a block of bfloat16 values ``x`` (as fp32): x's 16-bit order key over
    the reversed offset in the block (``BLOCK <= 2**16``), the lowest int32 where not
    ``valid``. A max of them is the largest x, lowest offset on ties (as :func:`key`)."""
    off = tl.arange(0, BLOCK)
    k = ((radix_bits(x, 16).to(tl.int32) ^ 0x8000) << 16) | (0xFFFF - off)
    return tl.where(valid, k, -0x7FFFFFFF - 1)


@triton.jit
def word16(b, start):
    """The int64 :func:`key` of a :func:`key16` ``b`` of the block starting at column
    ``start`` (KEY_MIN for the lowest int32: no valid element)."""
    h = b & -65536  # ordered32(x)'s high half; its low half is all ones for negative x
    h = tl.where(h < 0, h | 0xFFFF, h)  # (bfloat16), else zeros
    word = (h.to(tl.int64) << 32) | (LOW - (start + 0xFFFF - (b & 0xFFFF)).to(tl.int64))
    return tl.where(b == -0x7FFFFFFF - 1, KEY_MIN, word)


@triton.jit
def best_key16(x, start, valid, BLOCK: tl.constexpr):
    """:func:`best_key` of a block of bfloat16 values ``x`` (as fp32) at columns ``start +
    0 .. BLOCK - 1``: one int32 max of :func:`key16`, not an int32 max and an index min.
    Greedy's writer, 256 rows of V=151552, one H100, graph replay: 32.2 us against 34.5.
    Another run: 31.9; the key from the raw bits (int16 loads) 38.1; no key (a float max,
    no index) 27.3, so the key costs about 4.6 us. Per 8-column group (a ``[BLOCK / 8,
    8]`` tile, a float max and lowest hit column in registers, then this key per group; 56
    registers against 32): writer 1.6 / 2.9 / 7.7 / 32.2 us at M = 1 / 16 / 64 / 256
    against 1.7 / 3.6 / 7.9 / 31.7, greedy at M=256 34.7 against 33.7, so not kept."""
    return word16(tl.max(key16(x, valid, BLOCK), 0), start)


@triton.jit
def _low(w):
    """The fp32 value of the low bfloat16 half of int32 words ``w``."""
    return (w << 16).to(tl.float32, bitcast=True)


@triton.jit
def _high(w):
    """The fp32 value of the high bfloat16 half of int32 words ``w``."""
    return (w & -65536).to(tl.float32, bitcast=True)


@triton.jit
def _pair_max(a, b):
    """Half by half, the NaN-propagating max of bfloat16 pairs ``a``, ``b`` (int32 words):
    one ``max.NaN.bf16x2`` (the interpreter: the same in fp32)."""
    if HW:
        return tl.inline_asm_elementwise(
            "max.NaN.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        lo = _max_nan(_low(a), _low(b)).to(tl.int32, bitcast=True)
        hi = _max_nan(_high(a), _high(b)).to(tl.int32, bitcast=True)
        return (hi & -65536) | ((lo >> 16) & 0xFFFF)


@triton.jit
def _pair_hit(w, m, k, BLOCK: tl.constexpr):
    """Per word ``k`` of ``w`` (bfloat16 pairs): ``2k`` if its low half equals ``m`` (a
    bfloat16 value in fp32, not NaN), else ``2k + 1`` if its high half does, else ``BLOCK``;
    one ``setp.eq.bf16x2`` and two selects (``-0.0`` equals ``+0.0``)."""
    if HW:
        mb = m.to(tl.int32, bitcast=True) >> 16
        mm = (mb & 0xFFFF) | (mb << 16)
        return tl.inline_asm_elementwise(
            "{ .reg .pred p, q; .reg .b32 t; setp.eq.bf16x2 p|q, $1, $2; "
            "selp.b32 t, $4, $5, q; selp.b32 $0, $3, t, p; }",
            "=r,r,r,r,r,r",
            [w, mm + tl.zeros_like(w), 2 * k, 2 * k + 1, tl.full(w.shape, BLOCK, tl.int32)],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        return tl.where(_low(w) == m, 2 * k, tl.where(_high(w) == m, 2 * k + 1, BLOCK))


@triton.jit
def load_pairs(p, BLOCK: tl.constexpr):
    """``BLOCK`` bfloat16 values at ``p`` (4-byte aligned) as ``BLOCK / 2`` int32 words."""
    return tl.load(p.to(tl.pointer_type(tl.int32)) + tl.arange(0, BLOCK // 2))


@triton.jit
def pair_value(w):
    """The NaN-propagating max of the two halves of each word ``w``, as fp32."""
    return _max_nan(_low(w), _high(w))


@triton.jit
def key_of_pairs(w, m, start, BLOCK: tl.constexpr):
    """``key(m, start + j)``, ``j`` the lowest column of the words ``w`` (:func:`load_pairs`)
    whose value is their maximum ``m`` (fp32): one ``setp.eq.bf16x2`` per word, or for a
    NaN ``m`` the lowest NaN (the fp32 branch)."""
    k = tl.arange(0, BLOCK // 2)
    if m != m:
        lo = tl.min(tl.where(_low(w) != _low(w), 2 * k, BLOCK), 0)
        j = tl.minimum(lo, tl.min(tl.where(_high(w) != _high(w), 2 * k + 1, BLOCK), 0))
    else:
        j = tl.min(_pair_hit(w, m, k, BLOCK), 0)
    return key(m, start + j)


@triton.jit
def best_key_pairs(p, start, BLOCK: tl.constexpr):
    """:func:`best_key` of ``BLOCK`` bfloat16 values at ``p`` (4-byte aligned) in columns
    ``start + 0 .. BLOCK - 1``, all valid, read as int32 words and never converted: a
    ``max.NaN.bf16x2`` reduction, then :func:`key_of_pairs`.

    Why: greedy took as long on an H200 as on an H100 (32.9 and 33.8 us at M=256), whose
    HBM is about 30% slower, so :func:`best_key16`'s integer work bound it, not the read;
    compiled for sm_90, key16 runs 177 instructions per thread before the first barrier
    (16 elements), this about 4 for the max plus 45 for the hit pass. Measured on one H100,
    world size 1, V=151552, graph replay, µs at M = 1 / 16 / 64 / 256, greedy's writer
    alone: key16 1.6 / 3.7 / 8.8 / 35.2, pairs 1.7 / 2.8 / 5.4 / 27.1, a float max with no
    index (wrong ids, the floor) 1.5 / 2.2 / 4.4 / 26.6. In the benchmark (graph replay,
    the same H100, runs pairs / key16 / pairs): greedy at M=256 28.9 / 33.8 / 28.9 and at
    M=64 7.2 / 9.8 / 7.2; top_k=50 (whose probe reads pairs, :func:`group_tops_pairs`) at
    M=256 165.8 / 172.1 / 165.7; no op slower by more than 0.1."""
    w = load_pairs(p, BLOCK)
    return key_of_pairs(w, pair_value(tl.reduce(w, 0, _pair_max)), start, BLOCK)


@triton.jit
def group_tops_pairs(p, start, G: tl.constexpr, BLOCK: tl.constexpr):
    """``(ordered32 of the largest x of each of G column groups, best_key)`` of ``BLOCK``
    bfloat16 values at ``p`` (4-byte aligned) in columns ``start + 0 ..``, all valid."""
    w = load_pairs(p, BLOCK)
    tops = pair_value(tl.reduce(tl.reshape(w, [G, BLOCK // 2 // G]), 1, _pair_max))
    return ordered32(tops), key_of_pairs(w, tl.reduce(tops, 0, _max_nan), start, BLOCK)


@triton.jit
def argmax_key(v, gidx, valid):
    """``best_key`` for ``v`` without NaN (a float max, then its lowest valid column):
    about a third of the work; used only where a NaN cannot decide the answer."""
    top = tl.max(tl.where(valid, v, float("-inf")), 0)
    j = tl.min(tl.where(valid & (v == top), gidx, 0x7FFFFFFF), 0)
    return tl.where(j == 0x7FFFFFFF, KEY_MIN, key(top, j))


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def max_or_nan(v, valid):
    """The largest valid ``v``, NaN if any valid ``v`` is NaN, -inf if none is valid."""
    return tl.reduce(tl.where(valid, v, float("-inf")), 0, _max_nan)
