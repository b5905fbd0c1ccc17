"""vLLM's counter-based Gumbel noise and temperature, from plain torch ops.

The noise of row ``i`` at global token id ``j`` is a pure function of
``(seed[i], position[i], j)``, so every rank computes its own columns' noise and
gets exactly the numbers a single process would get for the gathered row. The
formula is vLLM 0.33's V2 sampler's (``vllm/v1/worker/gpu/sample/gumbel.py``),
transcribed operation for operation:

- ``h`` = 32-bit murmur3 over four words: the seed's low and high 32 bits, the
  position's low 32 bits, the token id; initial ``h = 0``, finalised as
  ``fmix32(h ^ 16)`` (16 bytes hashed);
- ``u = hi16(h) * 2**-16 + (lo16(h) + 0.5) * 2**-32`` in fp32 (both products are
  exact, the sum is rounded once), so ``0 < u < 1``;
- ``s = log1p(-u)``: for ``u < 0.25`` a degree-8 Horner series in fp32 (each step
  one rounded multiply and one rounded add, coefficients ``1/n`` rounded to fp32),
  otherwise ``log(max(1 - u, 2**-24))``;
- noise ``= -log(-s)``.

Integer steps run in int64 holding values in ``[0, 2**32)``: a product of two such
values wraps modulo ``2**64``, whose low 32 bits are the uint32 product. Every
floating-point step is a separate torch op, so no step is fused; torch evaluates
each element independently of the tensor's shape on a given device. ``torch.log``
may differ from another library's ``log`` in the last bit, so bits (not the
formula) are per device.
"""

from __future__ import annotations

import torch

LOW32 = (1 << 32) - 1
MASS_SCALE = 2.0**40
"""top-p masses are ``floor(exp(s - s_max) * MASS_SCALE)`` (see :mod:`.reference`)."""

_C1, _C2 = 0xCC9E2D51, 0x1B873593
_N, _F1, _F2 = 0xE6546B64, 0x85EBCA6B, 0xC2B2AE35
# 1/8 .. 1/2 rounded to fp32 once, as fp32 constants in the kernel.
_SERIES = [torch.tensor(1.0 / n, dtype=torch.float32).item() for n in range(8, 1, -1)]
_FLOOR = 2.0**-24  # 5.960464477539063e-08


def _rotl(v: torch.Tensor, r: int) -> torch.Tensor:
    return ((v << r) | (v >> (32 - r))) & LOW32


def _mix(h: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """One murmur3 block: ``key`` scrambled, xored into ``h``, ``h`` rotated and stepped."""
    key = _rotl((key * _C1) & LOW32, 15)
    h = _rotl(h ^ ((key * _C2) & LOW32), 13)
    return (h * 5 + _N) & LOW32


def _fmix(h: torch.Tensor) -> torch.Tensor:
    h = ((h ^ (h >> 16)) * _F1) & LOW32
    h = ((h ^ (h >> 13)) * _F2) & LOW32
    return h ^ (h >> 16)


def hash32(seeds: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """murmur3 of ``(seed lo, seed hi, position lo, id)`` as int64 ``[M, N]`` in
    ``[0, 2**32)``; ``seeds``/``positions`` ``[M]``, ``ids`` ``[N]`` (int64)."""
    seeds = seeds.to(torch.int64).reshape(-1, 1)
    h = torch.zeros_like(seeds)
    h = _mix(h, seeds & LOW32)
    h = _mix(h, (seeds >> 32) & LOW32)  # arithmetic shift, then the low word
    h = _mix(h, positions.to(torch.int64).reshape(-1, 1) & LOW32)
    h = _mix(h, ids.to(torch.int64).reshape(1, -1) & LOW32)
    return _fmix(h ^ 16)


def uniform(seeds: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """vLLM's fp32 uniform in (0, 1) from the hash's two 16-bit halves, ``[M, N]``."""
    h = hash32(seeds, positions, ids)
    hi = (h >> 16).to(torch.float32).mul_(2.0**-16)
    lo = (h & 0xFFFF).to(torch.float32).add_(0.5).mul_(2.0**-32)
    return hi.add_(lo)


def log1p_neg(u: torch.Tensor) -> torch.Tensor:
    """``log1p(-u)`` as vLLM computes it: the Horner series below 0.25, a log above."""
    poly = torch.full_like(u, _SERIES[0])
    for c in _SERIES[1:]:
        poly = u.mul(poly).add_(c)
    poly = u.mul(poly).add_(1.0)
    series = u.neg().mul_(poly)
    direct = torch.clamp_min(1.0 - u, _FLOOR).log_()
    return torch.where(u < 0.25, series, direct)


def gumbel(seeds: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """vLLM's Gumbel noise ``-log(-log1p(-u))`` as fp32 ``[M, N]`` for rows
    ``(seeds[i], positions[i])`` (int64 ``[M]``) at global token ids ``ids`` (``[N]``)."""
    return log1p_neg(uniform(seeds, positions, ids)).neg_().log_().neg_()


def scaled(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """The scores ``x / T`` in fp32 (IEEE division), a new tensor; rows with ``T == 0``
    or ``T == 1`` are ``x`` unchanged (vLLM skips them). ``temperature`` ``[M, 1]``
    (or ``[M]``)."""
    x = logits.to(torch.float32)
    t = temperature.to(device=x.device, dtype=torch.float32).reshape(-1, 1)
    return x.div(torch.where((t == 0) | (t == 1), 1.0, t))  # x / 1 is x, bit for bit


__all__ = ["MASS_SCALE", "gumbel", "hash32", "log1p_neg", "scaled", "uniform"]
