"""Device functions of the fused sampling kernels: sort keys, noise, and top-K selection.

Keys: an fp32 value ``v`` and a global column ``j`` become one int64
``ord(v) * 2**32 + (2**32 - 1 - j)``, where ``ord`` maps the fp32 bits to an
order-preserving signed int (``-0.0`` as ``+0.0``, every NaN as one NaN above
``+inf``). ``max`` of keys is the largest value, lowest column on ties: that is
``torch.argmax``'s rule, so maxima of keys compose across splits and ranks, and
keys are unique within a row.

Noise: :mod:`.rng`'s SplitMix64 in uint64 arithmetic, the temperature division
with ``div_rn`` and ``log`` from libdevice, so scores equal the torch ops'
bits on the same GPU (tests/test_sampling_gpu.py checks this).

Top-K: :func:`top_select` finds a block's ``K`` largest keys without sorting:
a bisection on ``ord(v)`` for the K-th largest value (at most 32 block-wide
counts), then the ties at that value in column order (a prefix sum), then each
selected element's slot (another prefix sum). Sorting networks (``tl.topk``)
cost far more at 4096 elements.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

GAMMA: tl.constexpr = tl.constexpr(0x9E3779B97F4A7C15)
MIX1: tl.constexpr = tl.constexpr(0xBF58476D1CE4E5B9)
MIX2: tl.constexpr = tl.constexpr(0x94D049BB133111EB)
KEY_MIN: tl.constexpr = tl.constexpr(-(1 << 63))
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)


@triton.jit
def ordered(v):
    """fp32 -> int64 holding an order-preserving signed 32-bit image."""
    b = v.to(tl.int32, bitcast=True)
    b = tl.where(v == 0.0, 0, b)
    b = tl.where(v != v, 0x7FC00000, b)
    b = tl.where(b < 0, b ^ 0x7FFFFFFF, b)
    return b.to(tl.int64)


@triton.jit
def key(v, gidx):
    return (ordered(v) << 32) | (LOW - gidx)


@triton.jit
def value(k):
    hi = (k >> 32).to(tl.int32)
    return tl.where(hi < 0, hi ^ 0x7FFFFFFF, hi).to(tl.float32, bitcast=True)


@triton.jit
def index(k):
    return LOW - (k & LOW)


@triton.jit
def row_key(seed):
    z = seed.to(tl.uint64, bitcast=True) * GAMMA
    z = (z ^ (z >> 30)) * MIX1
    z = (z ^ (z >> 27)) * MIX2
    return z ^ (z >> 31)


@triton.jit
def nlnl(rkey, gidx):
    """``log(-log(u))`` for row key ``rkey`` (uint64) and global columns ``gidx`` (int64)."""
    z = rkey + (gidx + 1).to(tl.uint64, bitcast=True) * GAMMA
    z = (z ^ (z >> 30)) * MIX1
    z = (z ^ (z >> 27)) * MIX2
    h = (z >> 41).to(tl.int32)
    u = (h.to(tl.float32) + 0.5) * 1.1920928955078125e-07
    return libdevice.log(-libdevice.log(u))


@triton.jit
def scores(x, t, rkey, gidx):
    """``(s, g)``: ``s = x / T`` (``T`` 0 read as 1) and the Gumbel score ``g``."""
    te = tl.where(t > 0.0, t, 1.0)
    s = tl.math.div_rn(x, te)
    return s, s - nlnl(rkey, gidx)


@triton.jit
def kth_value(h, valid, k):
    """The largest ``v`` with ``count(valid & (h >= v)) >= k`` (``h`` int64, any shape);
    the smallest valid ``h`` when fewer than ``k`` are valid."""
    lo = tl.min(tl.where(valid, h, 1 << 40))
    hi = tl.max(tl.where(valid, h, -(1 << 40)))
    while lo < hi:
        mid = hi - (hi - lo) // 2
        if tl.sum((valid & (h >= mid)).to(tl.int32)) >= k:
            lo = mid
        else:
            hi = mid - 1
    return lo


@triton.jit
def top_select(h, valid, k):
    """The ``k`` largest keys of a 1-D block whose values' ordered images are ``h`` and
    whose columns grow with the position: ``(selected, slot)``, slots ``0..k-1`` in
    column order (all valid elements when fewer than ``k``), and the K-th value."""
    v = kth_value(h, valid, k)
    gt = valid & (h > v)
    eq = valid & (h == v)
    need = k - tl.sum(gt.to(tl.int32))
    sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= need))
    return sel, tl.cumsum(sel.to(tl.int32), 0) - 1, v
