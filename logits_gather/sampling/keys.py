"""Device functions of the fused sampling kernels: sort keys, noise, and top-K selection.

Keys: an fp32 value ``v`` and a global column ``j`` become one int64
``ord(v) * 2**32 + (2**32 - 1 - j)``, where ``ord`` maps the fp32 bits to an
order-preserving signed int (``-0.0`` as ``+0.0``, every NaN as one NaN above
``+inf``). ``max`` of keys is the largest value, lowest column on ties: that is
``torch.argmax``'s rule, so maxima of keys compose across splits and ranks, and
keys are unique within a row.

Noise: :mod:`.rng`'s keyed 32-bit hash in uint32 arithmetic, the temperature as one
rounded reciprocal per row and one unfused multiply per element (:func:`scale`), and
``log`` from libdevice, so scores equal the torch ops' bits on the same GPU
(tests/test_sampling_gpu.py checks this).

Top-K: :func:`top_select` finds a block's ``K`` largest keys without sorting:
a radix select for the K-th largest value (one 256-bin histogram per 8 bits:
two rounds for bfloat16 inputs, four otherwise), then the ties at that value in
column order (a prefix sum), then each selected element's slot (another prefix
sum). Sorting networks (``tl.topk``) and bisections (32 block-wide counts) cost
far more at 4096 elements.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .ll import HW  # compiled, not the interpreter (which has no libdevice.mul_rn)

GAMMA: tl.constexpr = tl.constexpr(0x9E3779B97F4A7C15)
MIX1: tl.constexpr = tl.constexpr(0xBF58476D1CE4E5B9)
MIX2: tl.constexpr = tl.constexpr(0x94D049BB133111EB)
KEY_MIN: tl.constexpr = tl.constexpr(-(1 << 63))
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)
H1: tl.constexpr = tl.constexpr(0x7FEB352D)
H2: tl.constexpr = tl.constexpr(0x846CA68B)


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
    return LOW - (k & LOW)


@triton.jit
def key_at(h, gidx, top):
    """``(key, column)`` of the lowest column (``gidx`` int32) whose :func:`ordered32` image
    ``h`` is ``top``, the maximum of ``h``, where invalid elements hold the lowest int32
    (which no ``ordered32`` value is); the key is KEY_MIN if ``top`` is that (none valid)."""
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
def argmax_key(v, gidx, valid):
    """``best_key(v, gidx, valid)`` for ``v`` without NaN (a float max, then the lowest
    valid column holding it; ``-0.0`` equals ``+0.0``): about a third of the work.
    Callers use it only where a NaN cannot decide the answer."""
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
def row_key(seed):
    z = seed.to(tl.uint64, bitcast=True) * GAMMA
    z = (z ^ (z >> 30)) * MIX1
    z = (z ^ (z >> 27)) * MIX2
    return z ^ (z >> 31)


@triton.jit
def _lowbias32(a):
    a = (a ^ (a >> 16)) * tl.full((), H1, tl.uint32)
    a = (a ^ (a >> 15)) * tl.full((), H2, tl.uint32)
    return a ^ (a >> 16)


@triton.jit
def nlnl(rkey, gidx):
    """``log(-log(u))`` for row key ``rkey`` (uint64) and global columns ``gidx`` (int64
    or int32): :mod:`.rng`'s two keyed ``lowbias32`` rounds, in uint32 arithmetic."""
    low = (rkey & LOW).to(tl.uint32)
    high = (rkey >> 32).to(tl.uint32)
    a = _lowbias32(_lowbias32(gidx.to(tl.uint32, bitcast=False) + low) ^ high)
    u = ((a >> 9).to(tl.int32).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    return libdevice.log(-libdevice.log(u))


@triton.jit
def inv_t(t):
    """``1 / T`` rounded once (``T`` <= 0 read as 1): :func:`scale`'s factor."""
    return tl.math.div_rn(1.0, tl.where(t > 0.0, t, 1.0))


@triton.jit
def scale(x, r):
    """``s = x * r`` (``r``: :func:`inv_t`) rounded once, as :func:`.rng.scaled` does:
    ``mul.rn``, which ptxas never fuses into an FMA with what follows (a plain ``*``
    followed by a subtraction became one ``fma.rn``, with other bits)."""
    if HW:
        return libdevice.mul_rn(x, r)
    else:
        return x * r


@triton.jit
def scores(x, r, rkey, gidx):
    """``(s, g)``: ``s = x * r`` (:func:`scale`) and the Gumbel score ``g``."""
    s = scale(x, r)
    return s, s - nlnl(rkey, gidx)


@triton.jit
def radix_bits(x, BITS: tl.constexpr):
    """Order-preserving unsigned keys (uint32) of ``x`` (fp32 holding the input's
    values) in ``[0, 2**BITS)``: the top ``BITS`` bits of ``ordered32(x) + 2**31``.
    ``BITS = 16`` is exact (equal keys iff equal values) only for bfloat16 inputs."""
    u = ordered32(x).to(tl.uint32, bitcast=True) ^ 0x80000000
    return u >> (32 - BITS)


@triton.jit
def kth_largest(u, valid, k, BITS: tl.constexpr):
    """The ``k``-th largest (with multiplicity) of the valid ``u`` (uint32 in
    ``[0, 2**BITS)``, 1-D), ``1 <= k <= count(valid)``: a radix select, 8 bits per
    round, one block-wide histogram each (``BITS // 8`` rounds)."""
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
    """The ``k`` largest keys of a 1-D block, ordered by ``h`` (:func:`ordered32` values),
    ties by position (the column): returns ``(selected, slot, v, overflow)`` with slots
    ``0..`` in column order (every valid element when fewer than ``k``), ``v`` the
    K-th value, and ``overflow`` when elements equal to ``v`` were left out. ``u`` are
    radix keys ordered like ``h`` whose equality implies ``h``'s (:func:`radix_bits`)."""
    kk = tl.minimum(k, tl.sum(valid.to(tl.int32), 0))
    uk = kth_largest(u, valid, tl.maximum(kk, 1), BITS)
    v = tl.max(tl.where(valid & (u == uk), h, -0x7FFFFFFF - 1), 0)
    gt = valid & (h > v)
    eq = valid & (h == v)
    need = kk - tl.sum(gt.to(tl.int32), 0)
    sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= need))
    return sel, tl.cumsum(sel.to(tl.int32), 0) - 1, v, tl.sum(eq.to(tl.int32), 0) > need
