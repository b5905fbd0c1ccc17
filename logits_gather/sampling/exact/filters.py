"""Exact vocab-parallel ``sample`` with per-row top-k / top-p / min-p, from torch ops.

The general path: any mix of filters, each a scalar or ``[M]``, on CPU and GPU,
capturable in CUDA graphs (no host sync, a fixed sequence of exchanges for a
given set of filters). It reproduces :func:`.reference.sample` exactly:

1. one exchange of ``[greedy value, greedy index, local max of s]``: ``s_max``;
2. top-k (if requested): the k-th largest ``s`` by radix select (4 exchanges of
   ``[M, 256]`` int64 counts, :mod:`.select`);
3. min-p: local, from ``s_max`` (vLLM applies it before top-k; both keep an upper set
   of ``s``, and top-k's cut is taken over the whole row as :mod:`.reference` says);
4. top-p (if requested): ``tau`` by radix select over the int64 masses ``q``
   (4 exchanges); the first round's histogram total is ``Z``, which gives ``thr``;
5. one exchange of the best noisy score ``s + noise`` over the kept set.

It serves every call the fused kernels do not (:mod:`.route`), and their exact fallback.
On a fused sampler its scores ``s`` and ``g`` come from the kernels' own elementwise
pass, so a row that falls back draws the same bits as the fused kernels.

Cost: 2 + 4 (top-k) + 4 (top-p) small exchanges, each a handful of torch ops
over ``[M, N]``; correct but not fast.
"""

from __future__ import annotations

import torch

from .. import rng
from . import ops, select

MAX_CANDIDATES = 64
"""``top_k`` up to this is exchanged as candidates (one round on the fused path, one exchange
on the torch-ops path); larger ``top_k`` uses a radix select."""

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
        radix = sampler.exchange_for(select.WIDTH, m)
        keys = select.ordered_keys(s)

        def send(_payload: torch.Tensor) -> torch.Tensor:
            return radix.send(m)

    if top_k is not None:
        k = torch.where(top_k > 0, top_k, sampler.vocab).clamp_(1, sampler.vocab)
        kth = select.threshold(keys, None, k, send, radix.payload[:m])
        keep &= (keys >= kth) | off
    if top_p is not None:
        q = torch.floor(torch.exp(s - smax) * rng.MASS_SCALE).nan_to_num_(0.0).to(torch.int64)
        q = torch.where(keep, q, 0)

        def thr(z: torch.Tensor) -> torch.Tensor:
            return torch.minimum(torch.ceil(z.double() * top_p).to(torch.int64).clamp_(min=1), z)

        tau = select.threshold(keys, q, thr, send, radix.payload[:m])
        keep &= (keys >= tau) | (top_p >= 1) | off
    best = sampler.exchange_for(ops.BEST_WIDTH, m)
    ops.pack_greedy(shard, best.payload[:m])
    ops.pack_best(g.masked_fill_(~keep, ops.NEG_INF), best.payload[:m])
    sampled = ops.combine_best(best.send(m), sampler.columns)
    return torch.where(t[:, 0] == 0, greedy, sampled)


__all__ = ["MAX_CANDIDATES", "sample"]
