"""Exact vocab-parallel ``sample`` with per-row top-k / top-p / min-p, from torch ops.

The general path: any mix of filters, each a scalar or ``[M]``, on CPU and GPU,
capturable in CUDA graphs (no host sync, a fixed sequence of exchanges for a
given set of filters). It reproduces :func:`.reference.sample` exactly:

1. one exchange of ``[greedy value, greedy index, local max of s]``: ``s_max``;
2. top-k (if requested): the k-th largest ``s`` by radix select (4 exchanges of
   ``[M, 256]`` int64 counts, :func:`threshold`);
3. min-p: local, from ``s_max`` (vLLM applies it before top-k; both keep an upper set
   of ``s``, and top-k's cut is taken over the whole row as :mod:`.reference` says);
4. top-p (if requested): ``tau`` by radix select over the int64 masses ``q``
   (4 exchanges); the first round's histogram total is ``Z``, which gives ``thr``;
5. one exchange of the best noisy score ``s + noise`` over the kept set.

It serves every call the fused kernels do not (:mod:`.sampler`), and their exact fallback.
On a fused sampler its scores ``s`` and ``g`` come from the kernels' own elementwise
pass, so a row that falls back draws the same bits as the fused kernels.

Cost: 2 + 4 (top-k) + 4 (top-p) small exchanges, each a handful of torch ops
over ``[M, N]``; correct but not fast.

The weighted radix select: ``threshold(keys, weight, target)`` returns, per row, the
largest key ``v`` such that the total weight of the row's elements with key ``>= v`` is
``>= target`` (int64 weights: every sum exact, independent of order and tp). Weight 1
and target ``k`` give the k-th largest key (top-k's threshold); weight ``q`` and target
``thr`` give top-p's cut ``tau``. Keys are the 32-bit order-preserving image of fp32
values, 8 bits per round: each rank sums the weights of its elements whose key matches
the prefix found so far, per next digit (``[M, 256]`` int64, sent as fp32 pairs), the
histograms are exchanged and summed, and every rank picks the same digit.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import rng
from . import ops

RADIX_BITS = 8
BINS = 1 << RADIX_BITS
RADIX_WIDTH = 2 * BINS
"""Exchange width (fp32 words) of one radix round: ``BINS`` int64 sums."""


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
    ``payload`` is this rank's fp32 ``[M, RADIX_WIDTH]`` send buffer; ``exchange(payload)``
    returns every rank's copy as fp32 ``[M, W, RADIX_WIDTH]``.
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


MAX_CANDIDATES = 64
"""An int ``top_k`` up to this takes the fused top-k (candidates in the kernels); larger ones,
and every ``top_k`` on the torch-ops path, take this module's radix select."""

_SMAX = 1  # payload column (fp32) of the local max of s in the greedy exchange


def sample(
    sampler,
    shard: torch.Tensor,
    t: torch.Tensor,
    seed: torch.Tensor,
    positions: torch.Tensor,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
    min_p: torch.Tensor | None,
) -> torch.Tensor:
    """``t`` fp32 ``[M, 1]``, ``seed``/``positions`` int64 ``[M]``; filters None or
    ``[M, 1]`` tensors (``top_k`` int64, ``top_p`` float64, ``min_p`` fp32) on the
    sampler's device. The caller's ``shard`` is only read."""
    m = shard.shape[0]
    if sampler.fused is not None:  # the kernels' bits (vLLM's on the GPU), one pass
        s, g = sampler.fused.scores(shard, t.view(m), torch.stack((seed, positions), 1))
    else:  # a new fp32 tensor, whatever the shard's dtype
        s = rng.scaled(shard, t)
        g = s + rng.gumbel(seed, positions, sampler.ids)
    ex = sampler.exchange_for(ops.GREEDY_WIDTH, m)
    ops.pack_greedy(shard, ex.payload[:m])
    ex.payload[:m, _SMAX].copy_(s.amax(1))
    first = ex.send(m)
    greedy, _ = ops.combine_greedy(first, shard.dtype, sampler.columns)
    smax = first[..., _SMAX].amax(1, keepdim=True)
    off = ~torch.isfinite(smax)  # top-k and top-p are off in these rows
    keep = torch.ones_like(s, dtype=torch.bool)
    radix = None
    if min_p is not None:  # vLLM's test: drop s < s_max + log(min_p), rows with 0 skipped
        keep &= ~(s < smax + torch.log(min_p)) | (min_p == 0)
    if top_k is not None or top_p is not None:
        radix = sampler.exchange_for(RADIX_WIDTH, m)
        keys = ordered_keys(s)

        def send(_payload: torch.Tensor) -> torch.Tensor:
            return radix.send(m)

    if top_k is not None:
        k = torch.where(top_k > 0, top_k, sampler.vocab).clamp_(1, sampler.vocab)
        kth = threshold(keys, None, k, send, radix.payload[:m])
        keep &= (keys >= kth) | off
    if top_p is not None:
        q = torch.floor(torch.exp(s - smax) * rng.MASS_SCALE).nan_to_num_(0.0).to(torch.int64)
        q = torch.where(keep, q, 0)

        def thr(z: torch.Tensor) -> torch.Tensor:
            return torch.minimum(torch.ceil(z.double() * top_p).to(torch.int64).clamp_(min=1), z)

        tau = threshold(keys, q, thr, send, radix.payload[:m])
        keep &= (keys >= tau) | (top_p >= 1) | off
    best = sampler.exchange_for(ops.BEST_WIDTH, m)
    ops.pack_greedy(shard, best.payload[:m])
    ops.pack_best(g.masked_fill_(~keep, ops.NEG_INF), best.payload[:m])
    sampled = ops.combine_best(best.send(m), sampler.columns)
    return torch.where(t[:, 0] == 0, greedy, sampled)


__all__ = [
    "MAX_CANDIDATES",
    "RADIX_WIDTH",
    "kth_largest",
    "ordered_keys",
    "sample",
    "threshold",
    "to_value",
]
