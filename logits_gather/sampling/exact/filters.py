"""Exact vocab-parallel :func:`.reference.sample`, any filters, from torch ops on any device;
no host sync, so it captures in CUDA graphs. Correct, not fast (up to 10 small exchanges):

1. one exchange of ``[greedy value, greedy index, local max of s]`` gives ``s_max``; min-p
   is local;
2. top-k: the k-th largest ``s`` by :func:`threshold` (4 exchanges);
3. top-p: ``tau`` by :func:`threshold` over the masses ``q`` (4 exchanges);
4. one exchange of the best ``s + noise`` over the kept set.

It serves every filtered call of a sampler without the fused kernels (the fused path has
its own exact fallback, :mod:`..kernels.topp_exact`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .. import reference
from . import ops

if TYPE_CHECKING:
    from ..state import State

RADIX_BITS = 8
BINS = 1 << RADIX_BITS
RADIX_WIDTH = 2 * BINS  # fp32 words of one radix round: BINS int64 sums
MAX_CANDIDATES = 64
"""An int ``top_k`` up to this takes the fused top-k; larger ones take :func:`threshold`."""


def ordered_keys(xf: torch.Tensor) -> torch.Tensor:
    """fp32 -> int64 in [0, 2**32), monotone in the value (``-0.0`` maps like ``+0.0``)."""
    bits = xf.add(0.0).view(torch.int32).to(torch.int64)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).add_(1 << 31)


def threshold(
    keys: torch.Tensor,
    weight: torch.Tensor | None,
    target: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
    exchange: Callable[[torch.Tensor], torch.Tensor],
    payload: torch.Tensor,
) -> torch.Tensor:
    """Weighted radix select: per row, the largest key ``v`` with
    ``sum(weight[keys >= v]) >= target``, int64 ``[M, 1]``.

    ``weight`` int64 ``[M, N]`` (None: ones, so ``target = k`` gives the k-th largest);
    ``target`` int64 ``[M, 1]`` in ``1..total``, or a function of the row's total (known
    after round one: top-p's ``thr`` costs no exchange). 8 bits a round: each rank sums its
    weights per next digit under the prefix so far into ``payload`` (``BINS`` int64 sums),
    ``exchange(payload)`` gathers ``[M, W, RADIX_WIDTH]`` and every rank picks the same
    digit. Integer sums are exact in any order and at any tp.
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
        at_or_above = counts.flip(1).cumsum(1)  # [:, j]: weight of digits >= BINS - 1 - j
        j = (at_or_above < remaining).sum(1, keepdim=True).clamp_(max=BINS - 1)
        above = at_or_above.gather(1, (j - 1).clamp(min=0)).masked_fill_(j == 0, 0)
        remaining = remaining - above
        prefix = prefix * BINS + (BINS - 1 - j)
    return prefix


_SMAX = 1  # payload column (fp32) of the local max of s in the greedy exchange


def rows(value: float | int | torch.Tensor | None, m: int, dtype: torch.dtype, dev: torch.device):
    """None, or a filter's scalar or ``[M, 1]`` tensor as ``[M, 1]`` of ``dtype``."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    return torch.full((m, 1), value, dtype=dtype, device=dev)


def sample(
    state: State,
    shard: torch.Tensor,
    t: torch.Tensor,
    seed: torch.Tensor,
    positions: torch.Tensor,
    top_k: int | torch.Tensor | None,
    top_p: float | torch.Tensor | None,
    min_p: float | torch.Tensor | None,
) -> torch.Tensor:
    """``t`` fp32 ``[M, 1]``, ``seed``/``positions`` int64 ``[M]``; filters None, a scalar
    or ``[M, 1]`` tensors (``top_k`` int64, ``top_p`` float64, ``min_p`` fp32) on the
    state's device. ``shard`` is only read."""
    m = shard.shape[0]
    min_p = rows(min_p, m, torch.float32, state.device)
    top_k = rows(top_k, m, torch.int64, state.device)
    top_p = rows(top_p, m, torch.float64, state.device)
    s = reference.scaled(shard, t)
    g = s + reference.gumbel(seed, positions, state.ids)
    ex = state.exchange_for(ops.GREEDY_WIDTH, m)
    ops.pack_greedy(shard, ex.payload[:m])
    ex.payload[:m, _SMAX].copy_(s.amax(1))
    first = ex.send(m)
    greedy = ops.combine_greedy(first, shard.dtype, state.columns)
    smax = first[..., _SMAX].amax(1, keepdim=True)
    off = ~torch.isfinite(smax)  # top-k and top-p are off in these rows
    keep = torch.ones_like(s, dtype=torch.bool)
    if min_p is not None:
        keep &= ~(s < smax + torch.log(min_p)) | (min_p == 0)
    if top_k is not None or top_p is not None:
        radix = state.exchange_for(RADIX_WIDTH, m)
        keys = ordered_keys(s)

        def select(weight, target) -> torch.Tensor:
            return threshold(keys, weight, target, lambda _: radix.send(m), radix.payload[:m])

    if top_k is not None:
        k = torch.where(top_k > 0, top_k, state.vocab).clamp_(1, state.vocab)
        keep &= (keys >= select(None, k)) | off
    if top_p is not None:
        q = torch.floor(torch.exp(s - smax) * reference.MASS_SCALE).nan_to_num_(0.0)
        q = torch.where(keep, q.to(torch.int64), 0)

        def thr(z: torch.Tensor) -> torch.Tensor:
            return torch.minimum(torch.ceil(z.double() * top_p).to(torch.int64).clamp_(min=1), z)

        keep &= (keys >= select(q, thr)) | (top_p >= 1) | off
    best = state.exchange_for(ops.BEST_WIDTH, m)
    ops.pack_greedy(g.masked_fill_(~keep, ops.NEG_INF), best.payload[:m])
    sampled = ops.combine_greedy(best.send(m), torch.float32, state.columns)
    return torch.where(t[:, 0] == 0, greedy, sampled)
