"""Counter-based Gumbel noise from integer torch ops.

The noise of row ``i``, global vocabulary column ``j`` is a pure function of
``(seed[i], j)``. The row key ``K`` is the SplitMix64 finaliser of the seed (64
bits, once per row); per element, two keyed rounds of a 32-bit integer hash
(``lowbias32``, three xor-shifts and two multiplies):
``a = H(H((j + K_lo) mod 2**32) ^ K_hi)``, and the uniform is ``a``'s top 23 bits.
(32-bit rounds cost less than half of a 64-bit SplitMix64 step per element, which
dominated the fused kernel; the xor with ``K_hi`` between the rounds keeps rows
whose ``K_lo`` differ by ``d`` from being the same sequence shifted by ``d``.)
Every rank computes only its own columns, and gets exactly the numbers a single
process would get for the same columns of the gathered row: that is what makes
vocab-parallel sampling reproduce tp=1 bit for bit.

Everything is done in int64 with wrapping multiplies; logical right shifts are
arithmetic shifts followed by a mask. The uniform keeps 23 bits, on the grid
``(h + 0.5) / 2**23``, so it lies strictly inside (0, 1), has a symmetric
distribution, and converts to fp32 exactly; the Gumbel noise ``-log(-log(u))``
therefore lies in about [-2.81, 16.6]. The only floating-point steps are
``log`` (twice), the temperature's multiply (:func:`scaled`) and one subtraction,
which torch evaluates per element independently of tensor shape on a given device.
"""

from __future__ import annotations

import torch


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


GAMMA = _signed(0x9E3779B97F4A7C15)
MIX1 = _signed(0xBF58476D1CE4E5B9)
MIX2 = _signed(0x94D049BB133111EB)
H1 = 0x7FEB352D
H2 = 0x846CA68B
LOW32 = (1 << 32) - 1
UNIFORM_BITS = 23
MASS_SCALE = 2.0**40
"""top-p masses are ``floor(exp(s - s_max) * MASS_SCALE)`` (see :mod:`.reference`)."""


def _xorshift_(z: torch.Tensor, shift: int) -> torch.Tensor:
    """``z ^= z >>> shift`` (logical shift) in place."""
    return z.bitwise_xor_(torch.bitwise_right_shift(z, shift).bitwise_and_((1 << 64 - shift) - 1))


def row_keys(seed: torch.Tensor) -> torch.Tensor:
    """``[M]`` integer seeds -> ``[M, 1]`` int64 stream keys (SplitMix64 finaliser)."""
    z = seed.to(torch.int64).reshape(-1, 1).mul(GAMMA)
    _xorshift_(z, 30).mul_(MIX1)
    _xorshift_(z, 27).mul_(MIX2)
    return _xorshift_(z, 31)


def column_counters(start: int, columns: int, device: torch.device | str) -> torch.Tensor:
    """The counters of global columns ``start .. start + columns - 1``: the columns (int64)."""
    return torch.arange(start, start + columns, dtype=torch.int64, device=device)


def _lowbias32(a: torch.Tensor) -> torch.Tensor:
    """Chris Wellons' ``lowbias32`` on values in ``[0, 2**32)`` held in int64 (in place)."""
    a.bitwise_xor_(a >> 16).mul_(H1).bitwise_and_(LOW32)
    a.bitwise_xor_(a >> 15).mul_(H2).bitwise_and_(LOW32)
    return a.bitwise_xor_(a >> 16)


def neg_log_neg_log_uniform(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """``log(-log(u))`` (minus the Gumbel noise) as fp32 ``[M, len(counters)]``."""
    low = keys.bitwise_and(LOW32)
    high = keys.bitwise_right_shift(32).bitwise_and_(LOW32)
    a = _lowbias32(counters.add(low).bitwise_and_(LOW32))
    a = _lowbias32(a.bitwise_xor_(high))
    a.bitwise_right_shift_(32 - UNIFORM_BITS)
    u = a.to(torch.float32).add_(0.5).mul_(2.0**-UNIFORM_BITS)
    return u.log_().neg_().log_()


def scaled(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """The scores ``s = x * (1 / T)`` in fp32: ``1 / T`` rounded once per row (``T`` <= 0
    read as 1), then one rounded multiply per element. (Not ``x / T``: a division per
    element cost the fused sampling kernel 18 of its 119 instructions per element,
    and the two differ by at most an ulp. ``T = 1`` gives ``s = x`` either way.)
    ``temperature`` is ``[M, 1]``."""
    t = temperature.to(torch.float32)
    return logits.to(torch.float32).mul(torch.where(t > 0, t, 1.0).reciprocal())


def perturbed(
    logits: torch.Tensor, temperature: torch.Tensor, keys: torch.Tensor, counters: torch.Tensor
) -> torch.Tensor:
    """Gumbel-perturbed scores ``s + G`` in fp32 (``s``: :func:`scaled`); ``argmax``
    samples softmax(logits/T).

    ``temperature`` is ``[M, 1]`` fp32 and must be > 0 (rows with T == 0 are the
    caller's business). The same call on a column slice gives the same bits as
    the matching columns of the call on the whole row.
    """
    return scaled(logits, temperature).sub_(neg_log_neg_log_uniform(keys, counters))


__all__ = ["column_counters", "neg_log_neg_log_uniform", "perturbed", "row_keys", "scaled"]
