"""Exact k-th largest logit of the gathered row, for ``top_k`` too large to send candidates.

Radix select over the 32-bit order-preserving image of the fp32 logits, 8 bits
per round: each rank histograms the digit of its logits that match the prefix
found so far, the ``[M, 256]`` histograms are exchanged and summed (counts are
integers below 2**24, exact in fp32), and every rank picks the same digit. Four
rounds, four exchanges, then the threshold is known exactly on every rank.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

RADIX_BITS = 8
BINS = 1 << RADIX_BITS


def ordered_keys(xf: torch.Tensor) -> torch.Tensor:
    """fp32 -> int64 in [0, 2**32), monotone in the value (``-0.0`` maps like ``+0.0``)."""
    bits = xf.add(0.0).view(torch.int32).to(torch.int64)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).add_(1 << 31)


def _to_value(key: torch.Tensor) -> torch.Tensor:
    s = key - (1 << 31)
    return torch.where(s < 0, s ^ 0x7FFFFFFF, s).to(torch.int32).view(torch.float32)


def kth_largest(xf: torch.Tensor, k: int,
                exchange: Callable[[torch.Tensor], torch.Tensor],
                payload: torch.Tensor) -> torch.Tensor:
    """The k-th largest value of the gathered rows, as fp32 ``[M, 1]``.

    ``payload`` is this rank's ``[M, 256]`` fp32 send buffer and
    ``exchange(payload)`` returns every rank's copy as ``[M, W, 256]``.
    Rows with NaN give an unspecified value (callers override those rows).
    """
    m = xf.shape[0]
    keys = ordered_keys(xf)
    prefix = torch.zeros(m, 1, dtype=torch.int64, device=xf.device)
    remaining = torch.full((m, 1), float(k), dtype=torch.float32, device=xf.device)
    for shift in range(32 - RADIX_BITS, -1, -RADIX_BITS):
        digit = (keys >> shift) & (BINS - 1)
        if shift == 32 - RADIX_BITS:
            weight = torch.ones_like(xf)
        else:
            weight = ((keys >> (shift + RADIX_BITS)) == prefix).to(torch.float32)
        payload.zero_().scatter_add_(1, digit, weight)
        counts = exchange(payload).sum(1)
        # at_or_above[:, j]: how many logits have digit >= BINS - 1 - j.
        at_or_above = counts.flip(1).cumsum(1)
        j = (at_or_above < remaining).sum(1, keepdim=True).clamp_(max=BINS - 1)
        above = at_or_above.gather(1, (j - 1).clamp(min=0)).masked_fill_(j == 0, 0.0)
        remaining = remaining - above
        prefix = prefix * BINS + (BINS - 1 - j)
    return _to_value(prefix)


__all__ = ["kth_largest", "ordered_keys"]
