"""Exact weighted radix select over the shards of a row, for thresholds candidates cannot give.

``threshold(keys, weight, target)`` returns, per row, the largest key ``v`` such
that the total weight of the row's elements with key ``>= v`` is ``>= target``
(weights are int64, so every sum is exact and independent of order and tp):

- weight 1, target ``k``: ``v`` is the k-th largest key (top-k's threshold);
- weight = the top-p mass ``q``, target ``thr``: ``v`` is top-p's cut ``tau``.

Keys are the 32-bit order-preserving image of fp32 values. 8 bits per round:
each rank sums the weights of its elements whose key matches the prefix found so
far, per next digit (``[M, 256]`` int64, sent as fp32 pairs), the histograms
are exchanged and summed, and every rank picks the same digit. Four rounds,
four exchanges, no host sync.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

RADIX_BITS = 8
BINS = 1 << RADIX_BITS
WIDTH = 2 * BINS
"""Exchange width (fp32 words) of one round: ``BINS`` int64 sums."""


def ordered_keys(xf: torch.Tensor) -> torch.Tensor:
    """fp32 -> int64 in [0, 2**32), monotone in the value (``-0.0`` maps like ``+0.0``)."""
    bits = xf.add(0.0).view(torch.int32).to(torch.int64)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).add_(1 << 31)


def to_value(key: torch.Tensor) -> torch.Tensor:
    s = key - (1 << 31)
    return torch.where(s < 0, s ^ 0x7FFFFFFF, s).to(torch.int32).view(torch.float32)


def threshold(
    keys: torch.Tensor,
    weight: torch.Tensor | None,
    target: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
    exchange: Callable[[torch.Tensor], torch.Tensor],
    payload: torch.Tensor,
) -> torch.Tensor:
    """The largest key ``v`` with ``sum(weight[keys >= v]) >= target``, int64 ``[M, 1]``.

    ``weight`` int64 ``[M, N]`` (None: all ones), ``target`` int64 ``[M, 1]``
    (>= 1 and <= the row's total weight, else the result is unspecified), or a
    function of the row's total weight ``[M, 1]`` (known after the first round, so
    top-p's ``thr`` costs no extra exchange).
    ``payload`` is this rank's fp32 ``[M, WIDTH]`` send buffer; ``exchange(payload)``
    returns every rank's copy as fp32 ``[M, W, WIDTH]``.
    """
    m = keys.shape[0]
    hist = payload.view(torch.int64)
    w = torch.ones_like(keys) if weight is None else weight
    prefix = torch.zeros(m, 1, dtype=torch.int64, device=keys.device)
    remaining = target
    for shift in range(32 - RADIX_BITS, -1, -RADIX_BITS):
        digit = (keys >> shift) & (BINS - 1)
        if shift == 32 - RADIX_BITS:
            weight_now = w
        else:
            weight_now = torch.where((keys >> (shift + RADIX_BITS)) == prefix, w, 0)
        hist.zero_().scatter_add_(1, digit, weight_now)
        counts = exchange(payload).view(torch.int64).sum(1)
        if callable(remaining):
            remaining = remaining(counts.sum(1, keepdim=True))
        # at_or_above[:, j]: weight of digits >= BINS - 1 - j.
        at_or_above = counts.flip(1).cumsum(1)
        j = (at_or_above < remaining).sum(1, keepdim=True).clamp_(max=BINS - 1)
        above = at_or_above.gather(1, (j - 1).clamp(min=0)).masked_fill_(j == 0, 0)
        remaining = remaining - above
        prefix = prefix * BINS + (BINS - 1 - j)
    return prefix


def kth_largest(
    xf: torch.Tensor,
    k: int | torch.Tensor,
    exchange: Callable[[torch.Tensor], torch.Tensor],
    payload: torch.Tensor,
) -> torch.Tensor:
    """The k-th largest value of the gathered rows (``k`` an int or int64 ``[M]``),
    as fp32 ``[M, 1]``. Rows with NaN give an unspecified value."""
    m = xf.shape[0]
    if isinstance(k, torch.Tensor):
        target = k.to(torch.int64).expand(m).reshape(m, 1)
    else:  # torch.full, not as_tensor: no host copy, so it can be captured
        target = torch.full((m, 1), k, dtype=torch.int64, device=xf.device)
    return to_value(threshold(ordered_keys(xf), None, target, exchange, payload))


__all__ = ["BINS", "WIDTH", "kth_largest", "ordered_keys", "threshold", "to_value"]
