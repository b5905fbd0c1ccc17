"""vLLM 0.33's V2 noise and temperature, as the fused sampling kernels compute them.

murmur3 over the row's seed (low, then high 32 bits), its position (low 32 bits) and the
global column; vLLM's fp32 uniform from the hash's 16-bit halves and its Gumbel transform;
``s = x / T``, skipped at T in {0, 1}. Written with the same Triton operations in the same
order as vLLM's kernels, so the compiled bits agree with theirs on the same GPU
(tests/sampling/test_vllm_fused.py). The definition in torch: :mod:`..reference`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .keys import LOW, index, key, value

C1: tl.constexpr = tl.constexpr(0xCC9E2D51)
C2: tl.constexpr = tl.constexpr(0x1B873593)
C3: tl.constexpr = tl.constexpr(0xE6546B64)
F1: tl.constexpr = tl.constexpr(0x85EBCA6B)
F2: tl.constexpr = tl.constexpr(0xC2B2AE35)


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
def score_keys(cand, seed_ptr, pos_ptr, row):
    """Gumbel score keys of candidate keys ``key(s, j)``."""
    col = index(cand)
    return key(value(cand) + noise(row_key(seed_ptr, pos_ptr, row), col), col)
