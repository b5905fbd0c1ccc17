"""Which path serves a checked :meth:`~.sampler.VocabParallelSampler.sample` call: the
torch-ops path, or one of the fused kernels' sequences (:mod:`.rounds`, :mod:`.fallback`).

Filters that are off (``top_k`` 0 or >= V, ``top_p >= 1``, ``min_p <= 0`` as scalars)
are dropped first. Without the fused kernels (no Triton, CPU, or the switch) every call
takes :func:`.filters.sample`. On the fused path: no filter, :meth:`.filtered.Fused.sample`;
an int ``top_k <= 64`` (with or without ``top_p``, ``min_p``), the fused top-k; a
per-row ``top_k`` tensor, or a larger int one as rows of it, :func:`.fallback.sample_rows_k`;
``top_p`` (with or without ``min_p``), :func:`.fallback.sample`; ``min_p`` alone, the fused
min-p. Everything else runs :func:`.filters.sample`: so do int ``top_k`` where
:mod:`.policy`'s switch turns the fused top-k off, per-row ones where its other
switch does, and ints above 64 where either does.
"""

from __future__ import annotations

from typing import Any

import torch

from .exact import filters
from .exact.filters import MAX_CANDIDATES
from .fused import fallback

Filter = int | float | torch.Tensor | None


def sample(sampler: Any, shard: torch.Tensor, t: torch.Tensor, seeds: torch.Tensor,
           positions: torch.Tensor, k: Filter, p: Filter, mp: Filter) -> torch.Tensor:  # fmt: skip
    """Tokens ``[M]`` for checked arguments (``t`` fp32 ``[M, 1]``, ``seeds`` and
    ``positions`` int64 ``[M]``; ``k`` an int or int64 ``[M]``, ``p`` and ``mp`` floats or
    ``[M]`` tensors, or None). The fused kernels read seed and position from one int64
    ``[M, 2]`` tensor (one small copy per call)."""
    m = shard.shape[0]
    fused = sampler.fused
    if isinstance(k, int) and not 0 < k < sampler.vocab:
        k = None
    if isinstance(p, float) and p >= 1.0:
        p = None
    if isinstance(mp, float) and mp <= 0.0:
        mp = None
    if fused is not None and k is None and p is None and mp is None:
        return fused.sample(shard, t.view(m), torch.stack((seeds, positions), 1), None)
    dev = sampler.device
    if fused is not None:
        rows = torch.stack((seeds, positions), 1)
    if fused is not None and isinstance(k, int) and sampler.fused_topk and k <= MAX_CANDIDATES:
        # top-k, then min-p and/or top-p over the exact top-k set
        _, _, pv, mpv = fallback.filter_rows(sampler, p, mp, m)
        return fused.sample_topk(shard, t.view(m), rows, k, pv, mpv)
    if fused is not None and isinstance(k, torch.Tensor) and sampler.fused_rows:
        return fallback.sample_rows_k(sampler, shard, t, (seeds, positions, rows), k, p, mp)
    if fused is not None and isinstance(k, int) and sampler.fused_topk and sampler.fused_rows:
        # 64 < k < V, as rows of k in top-p's launches (top_p 1.0 where none: rows with
        # k on are decided from their candidates whatever their p), or the fallback
        k = fallback.filled(sampler, k, m, torch.int64)
        return fallback.sample_rows_k(
            sampler, shard, t, (seeds, positions, rows), k, 1.0 if p is None else p, mp
        )
    if fused is not None and k is None and p is not None:  # top-p (+ min-p)
        return fallback.sample(sampler, shard, t, (seeds, positions, rows), p, mp)
    if fused is not None and p is None and k is None:  # min-p alone: fused
        mpv = fallback.filled(sampler, mp, m, torch.float32).view(m)
        return fused.sample_minp(shard, t.view(m), rows, mpv)
    mp = fallback.rows(mp, m, torch.float32, dev)
    k = fallback.rows(k, m, torch.int64, dev)
    p = fallback.rows(p, m, torch.float64, dev)
    return filters.sample(sampler, shard, t, seeds, positions, k, p, mp)


__all__ = ["sample"]
