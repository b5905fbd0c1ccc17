"""Device functions of the top-p final kernels (:mod:`.nucleus`, :mod:`.spill`,
:mod:`.topk`): :mod:`.reference`'s integer masses and threshold, the search for the
nucleus cut ``tau`` over radix keys, and the decoding and scoring of candidate keys
``key(s, j)`` (imported lazily: needs Triton)."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .keys import divisor, index, key, noise, ordered32, radix_bits, row_key, scale, value

SCALE: tl.constexpr = tl.constexpr(1099511627776.0)  # 2**40, rng.MASS_SCALE


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
def _cut(h, q, lo, hi, thr):
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
    """:func:`_cut` over the x keys ``u`` of the ``on`` lanes (:func:`decode_keys`), as an
    ``h`` level: ``h`` of the lanes at the x level found (``default`` if none). ``s`` is
    monotone in ``x``, so the largest x level whose mass reaches ``thr`` holds the largest
    such ``s`` level; over bfloat16 keys that takes at most 16 steps (``h``: about 25)."""
    lo = _cut(u, q, lo, hi, thr)
    return tl.max(tl.where(on & (u == lo), h, default), 0)


@triton.jit
def decode_keys(cand, t, valid, XBITS: tl.constexpr):
    """``(s, h, u, bytes)`` of candidate keys ``key(s, j)``: ``h = ordered32(s)`` and
    radix keys ``u`` ordered like ``h`` (int64 both) in ``[0, 2**(8 * bytes))``.
    ``XBITS == 16`` (bfloat16 inputs): ``u`` is the radix key of ``x``, ``s * T`` rounded
    to bfloat16 (to nearest even, in integer ops: the interpreter's cast truncates), when
    every valid ``s`` equals ``x / T`` again (then equal ``u`` means equal ``s``), and
    ``bytes = 2``; otherwise ``u`` is ``h``'s 32 bits and ``bytes = 4``."""
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
def score_keys(cand, seed_ptr, row):
    """Gumbel score keys of candidate keys ``key(s, j)``."""
    col = index(cand)
    return key(value(cand) + noise(row_key(seed_ptr, row), col), col)
