"""Radix keys of the fused sampling kernels: top-k's select and top-p's mass cut.

Top-k: :func:`top_select` finds a block's ``K`` largest keys without sorting: a radix
select for the K-th largest value (one 256-bin histogram per 8 bits: two rounds for
bfloat16 inputs, four otherwise), then the ties at that value in column order and each
selected element's slot (prefix sums). Sorting networks (``tl.topk``) and bisections
(32 block-wide counts) cost far more at 4096 elements.

Top-p: :mod:`..reference`'s integer masses and threshold, the bisection for the nucleus
cut ``tau`` over radix keys, and the decoding of candidate keys ``key(s, j)`` into them.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .keys import ordered32, radix_bits, value
from .noise import divisor, scale


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
