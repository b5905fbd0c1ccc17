"""Which path serves a checked :meth:`~.sampler.VocabParallelSampler.sample` call.

Every call takes the exact torch-ops path (:func:`.filters.sample`), on every device:
it computes vLLM's noise keyed by ``(seed, position, token id)`` and divides by the
temperature as :mod:`.reference` defines. The fused Triton kernels serve
:meth:`~.sampler.VocabParallelSampler.greedy` and ``logprobs``; their sampling
sequences still draw the previous noise, so they are not used for ``sample`` until
they compute the same bits as vLLM's kernels. Filters that are off (``top_k`` 0 or
>= V, ``top_p >= 1``, ``min_p <= 0`` as scalars) are dropped first.
"""

from __future__ import annotations

from typing import Any

import torch

from . import filters

Filter = int | float | torch.Tensor | None


def _rows(value: Filter, m: int, dtype: torch.dtype, dev: torch.device) -> torch.Tensor | None:
    """None, or a filter's scalar or ``[M, 1]`` tensor as ``[M, 1]`` of ``dtype``."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    return torch.full((m, 1), value, dtype=dtype, device=dev)


def sample(sampler: Any, shard: torch.Tensor, t: torch.Tensor, seeds: torch.Tensor,
           positions: torch.Tensor, k: Filter, p: Filter, mp: Filter) -> torch.Tensor:  # fmt: skip
    """Tokens ``[M]`` for checked arguments (``t`` fp32 ``[M, 1]``, ``seeds`` and
    ``positions`` int64 ``[M]``; ``k`` an int or int64 ``[M]``, ``p`` and ``mp`` floats
    or ``[M]`` tensors, or None)."""
    m = shard.shape[0]
    if isinstance(k, int) and not 0 < k < sampler.vocab:
        k = None
    if isinstance(p, float) and p >= 1.0:
        p = None
    if isinstance(mp, float) and mp <= 0.0:
        mp = None
    dev = sampler.device
    mp = _rows(mp, m, torch.float32, dev)
    k = _rows(k, m, torch.int64, dev)
    p = _rows(p, m, torch.float64, dev)
    return filters.sample(sampler, shard, t, seeds, positions, k, p, mp)


__all__ = ["sample"]
