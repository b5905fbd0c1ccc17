"""Device functions of the fused sampling kernels: sort keys, noise, radix selects and
top-p masses.

Keys: an fp32 value ``v`` and a global column ``j`` become one int64
``ord(v) * 2**32 + (2**32 - 1 - j)``, where ``ord`` maps the fp32 bits to an
order-preserving signed int (``-0.0`` as ``+0.0``, every NaN as one NaN above
``+inf``). ``max`` of keys is the largest value, lowest column on ties (``torch.argmax``'s
rule), so maxima compose across splits and ranks, and keys are unique within a row.

Noise and temperature: vLLM's V2 definition (murmur3 over seed, position and global
column; its uniform and Gumbel transform; ``x / T`` skipped at T in {0, 1}), written
with the same Triton operations in the same order as vLLM's kernels, so the compiled
bits agree with theirs on the same GPU (tests/test_sampling_vllm_gpu.py).

Top-K: :func:`top_select` finds a block's ``K`` largest keys without sorting: a radix
select for the K-th largest value (one 256-bin histogram per 8 bits: two rounds for
bfloat16 inputs, four otherwise), then the ties at that value in column order and each
selected element's slot (prefix sums). Sorting networks (``tl.topk``) and bisections
(32 block-wide counts) cost far more at 4096 elements.

Masses: :mod:`..reference`'s integer masses and threshold, the bisection for the nucleus
cut ``tau`` over radix keys, and the decoding and scoring of candidate keys ``key(s, j)``.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .ll import HW

KEY_MIN: tl.constexpr = tl.constexpr(-(1 << 63))
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)
C1: tl.constexpr = tl.constexpr(0xCC9E2D51)
C2: tl.constexpr = tl.constexpr(0x1B873593)
C3: tl.constexpr = tl.constexpr(0xE6546B64)
F1: tl.constexpr = tl.constexpr(0x85EBCA6B)
F2: tl.constexpr = tl.constexpr(0xC2B2AE35)


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


@triton.jit
def _rotl(v, shift: tl.constexpr):
    return (v << shift) | (v >> (32 - shift))


@triton.jit
def _mix(h, k):
    """One murmur3 block: ``k`` (uint32) mixed into the state ``h``."""
    k = k * tl.full((), C1, tl.uint32)
    k = _rotl(k, 15) * tl.full((), C2, tl.uint32)
    h = _rotl(h ^ k, 13)
    return h * 5 + tl.full((), C3, tl.uint32)


@triton.jit
def row_key(seed_ptr, pos_ptr, row):
    """The row's murmur3 state (uint32) after seed low, seed high and position low 32 bits
    (``seed_ptr``, ``pos_ptr``: int64 ``[M]`` seeds and positions)."""
    seed = tl.load(seed_ptr + row)
    pos = tl.load(pos_ptr + row)
    h = tl.zeros((), tl.uint32)
    h = _mix(h, (seed & LOW).to(tl.uint32))
    h = _mix(h, ((seed >> 32) & LOW).to(tl.uint32))
    return _mix(h, (pos & LOW).to(tl.uint32))


@triton.jit
def _log1p_neg(u):
    """``log(1 - u)``: the degree-8 Horner series below 0.25, ``log(max(1 - u, 2**-24))``
    above, in the definition's order of operations (ptxas fuses the steps into FMAs the
    same way for the same code)."""
    q = 1.0 / 8.0
    q = 1.0 / 7.0 + u * q
    q = 1.0 / 6.0 + u * q
    q = 1.0 / 5.0 + u * q
    q = 1.0 / 4.0 + u * q
    q = 1.0 / 3.0 + u * q
    q = 1.0 / 2.0 + u * q
    q = 1.0 + u * q
    series = -u * q
    direct = tl.log(tl.maximum(1.0 - u, 5.960464477539063e-08))
    return tl.where(u < 0.25, series, direct)


@triton.jit
def noise(h, gidx):
    """The Gumbel noise ``-log(-log(1 - u))`` (fp32) of row state ``h`` at global columns
    ``gidx``: murmur3's last block and finaliser, ``u`` from the hash's 16-bit halves."""
    a = _mix(h, gidx.to(tl.uint32)) ^ 16
    a = (a ^ (a >> 16)) * tl.full((), F1, tl.uint32)
    a = (a ^ (a >> 13)) * tl.full((), F2, tl.uint32)
    a = a ^ (a >> 16)
    hi = (a >> 16).to(tl.int32).to(tl.float32)
    lo = (a & 0xFFFF).to(tl.int32).to(tl.float32)
    u = hi * 1.52587890625e-05 + (lo + 0.5) * 2.3283064365386963e-10
    return -tl.log(-_log1p_neg(u))


@triton.jit
def divisor(t):
    """The temperature as :func:`scale`'s divisor: ``T``, with 0 (a greedy row) read as 1."""
    return tl.where(t == 0.0, 1.0, t)


@triton.jit
def scale(x, d):
    """``s = x / d`` (``d``: :func:`divisor`), Triton's fp32 division, skipped at ``d == 1``.
    The kernels assume it is monotone in ``x`` (maxima and bounds of ``x`` map to ``s``)."""
    return tl.where(d == 1.0, x, x / d)


@triton.jit
def scores(x, d, h, gidx):
    """``(s, g)``: ``s = x / T`` (:func:`scale`) and the Gumbel score ``g = s + noise``."""
    s = scale(x, d)
    return s, s + noise(h, gidx)


@triton.jit
def use_greedy(t, gbest):
    smax = scale(value(gbest), divisor(t))
    return (t == 0.0) | (smax != smax) | (tl.abs(smax) == float("inf"))


@triton.jit
def radix_bits(x, BITS: tl.constexpr):
    """The top ``BITS`` bits of ``ordered32(x) + 2**31`` (uint32): order-preserving keys,
    exact at ``BITS = 16`` only for bfloat16 inputs."""
    u = ordered32(x).to(tl.uint32, bitcast=True) ^ 0x80000000
    return u >> (32 - BITS)


@triton.jit
def kth_largest(u, valid, k, BITS: tl.constexpr):
    """The ``k``-th largest (with multiplicity, ``1 <= k <= count(valid)``) of the valid
    ``u`` (uint32 in ``[0, 2**BITS)``, 1-D): 8 bits per round, one histogram each."""
    prefix = tl.zeros((), tl.uint32)
    rem = k
    bins = tl.arange(0, 256)
    for r in tl.static_range(BITS // 8):
        shift = BITS - 8 * (r + 1)
        if r == 0:
            match = valid
        else:
            match = valid & ((u >> (shift + 8)) == prefix)
        # Barriers around the histogram: its shared-memory counts must not overlap the
        # reductions before and after it (a guard; see the README's GPU-test notes).
        tl.debug_barrier()
        hist = tl.histogram(((u >> shift) & 255).to(tl.int32), 256, match)
        tl.debug_barrier()
        ge = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist  # count of digits >= each bin
        digit = tl.sum((ge >= rem).to(tl.int32), 0) - 1
        rem -= tl.sum(tl.where(bins == digit, ge - hist, 0), 0)
        prefix = prefix * 256 + digit.to(tl.uint32)
    return prefix


@triton.jit
def kth_largest_in(u, valid, k, rounds):
    """:func:`kth_largest` of int64 keys ``u`` in ``[0, 2**(8 * rounds))`` for a runtime
    ``rounds`` (1..4): one copy of the code serves keys of either width."""
    prefix = tl.zeros((), tl.int64)
    rem = k
    bins = tl.arange(0, 256)
    r = 0
    while r < rounds:  # a while loop: the interpreter cannot range over a tensor
        shift = 8 * (rounds - 1 - r)
        match = valid & ((u >> (shift + 8)) == prefix)  # round 0: every key (u >> 8 * rounds)
        tl.debug_barrier()  # as in kth_largest
        hist = tl.histogram(((u >> shift) & 255).to(tl.int32), 256, match)
        tl.debug_barrier()
        ge = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist
        digit = tl.sum((ge >= rem).to(tl.int32), 0) - 1
        rem -= tl.sum(tl.where(bins == digit, ge - hist, 0), 0)
        prefix = prefix * 256 + digit.to(tl.int64)
        r += 1
    return prefix


@triton.jit
def top_select(h, u, valid, k, BITS: tl.constexpr):
    """``(selected, slot, v, overflow)``: the ``k`` largest of a 1-D block by ``h``
    (ordered32), ties by column, slots in column order, ``v`` the k-th value, ``overflow``
    when elements equal to ``v`` were left out. ``u``: radix keys ordered like ``h``."""
    kk = tl.minimum(k, tl.sum(valid.to(tl.int32), 0))
    uk = kth_largest(u, valid, tl.maximum(kk, 1), BITS)
    v = tl.max(tl.where(valid & (u == uk), h, -0x7FFFFFFF - 1), 0)
    gt = valid & (h > v)
    eq = valid & (h == v)
    need = kk - tl.sum(gt.to(tl.int32), 0)
    sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= need))
    return sel, tl.cumsum(sel.to(tl.int32), 0) - 1, v, tl.sum(eq.to(tl.int32), 0) > need


@triton.jit
def row_k(k, row, ROWK: tl.constexpr):
    """``k``, or with ``ROWK`` row ``row`` of the int64 tensor ``k`` clamped to 1..64 (the
    caller replaces the tokens of rows outside that range)."""
    if ROWK:
        return tl.minimum(tl.maximum(tl.load(k + row), 1), 64)
    else:
        return k


SCALE: tl.constexpr = tl.constexpr(1099511627776.0)  # 2**40, reference.MASS_SCALE


@triton.jit
def mass_q(s, smax):
    """The definition's ``floor(exp(s - s_max) * 2**40)`` as int64."""
    return libdevice.floor(libdevice.exp(s - smax) * SCALE).to(tl.int64)


@triton.jit
def mass_threshold(total, p):
    """The definition's ``min(Z, max(1, ceil(float64(Z) * p)))``."""
    thr = libdevice.ceil(total.to(tl.float64) * p).to(tl.int64)
    return tl.minimum(tl.maximum(thr, 1), total)


@triton.jit
def cut_level(h, q, lo, hi, thr):
    """The largest level in ``[lo, hi)`` whose mass (``q`` at ``h`` at or above it)
    reaches ``thr``, by bisection: the mass at or above ``lo`` must reach it, the mass
    at or above ``hi`` must not. (A 5-way search, four levels weighed per pass over
    ``[4, lanes]``, half the steps, made nucleus_final slower: 17.5 against 14.9 us at
    M=64 on one H200. Each step's work, not the chain of reductions, sets the cost.)"""
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        if tl.sum(tl.where(h >= mid, q, 0), 0) >= thr:
            lo = mid
        else:
            hi = mid
    return lo


@triton.jit
def tau_level(u, h, q, on, lo, hi, thr, default):
    """:func:`cut_level` over radix keys ``u`` of the ``on`` lanes, as the ``h`` level of the
    lanes found (``default`` if none): 16 steps at most over bfloat16 keys, not ~25."""
    lo = cut_level(u, q, lo, hi, thr)
    return tl.max(tl.where(on & (u == lo), h, default), 0)


@triton.jit
def decode_keys(cand, t, valid, XBITS: tl.constexpr):
    """``(s, h, u, bytes)`` of candidate keys ``key(s, j)``: ``h = ordered32(s)``, radix
    keys ``u`` ordered like ``h`` in ``[0, 2**(8 * bytes))``. bfloat16 (``XBITS == 16``):
    ``u`` is x's 16-bit key, x = ``s * T`` rounded to nearest even in integer ops (the
    interpreter's cast truncates), when every valid ``s`` equals ``x / T`` again."""
    s = value(cand)
    h = ordered32(s)
    u = (h.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.int64)
    nbytes = tl.full((), 4, tl.int32)
    if XBITS == 16:
        te = tl.where(t > 0.0, t, 1.0)
        b = (s * te).to(tl.int32, bitcast=True)
        x = ((b + 0x7FFF + ((b >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
        back = scale(x, divisor(t))
        same = (back == s) | ((back != back) & (s != s))
        if tl.min(tl.where(valid, same, True).to(tl.int32), 0) == 1:
            u = radix_bits(x, 16).to(tl.int64)
            nbytes = nbytes - 2
    return s, h.to(tl.int64), u, nbytes


@triton.jit
def score_keys(cand, seed_ptr, pos_ptr, row):
    """Gumbel score keys of candidate keys ``key(s, j)``."""
    col = index(cand)
    return key(value(cand) + noise(row_key(seed_ptr, pos_ptr, row), col), col)
