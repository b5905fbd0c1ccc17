"""Vocab-parallel greedy, sampling and logprobs from each rank's shard ``[M, N]`` (columns
``rank * N ..`` of the ``[M, W * N]`` logits), without gathering them: each operation
reduces its shard, exchanges a few values per row and merges them identically on every
rank. :func:`greedy` and :func:`sample` equal :mod:`.reference` of the gathered logits bit
for bit at every tp; :func:`logprobs` is within ``1e-6 * (1 + |ref|)`` of the exact value.

Modules: :mod:`.reference` (the definition, every tie rule), :mod:`.sampler` (the class;
which path serves which call), :mod:`.checks`, :mod:`.state` (what the paths share),
:mod:`.exact` (the torch-ops path, any device), :mod:`.fused` and :mod:`.kernels` (the GPU
path).

The functions here share a sampler per ``(group, device, N)`` that grows with ``M``; its
builds are collective, so every rank makes the same calls with the same ``M``, filters and
``top_n``. For CUDA graphs, build a :class:`VocabParallelSampler` yourself;
:func:`free_samplers` drops the cached ones (before destroying the process group).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from . import checks, reference
from .sampler import MAX_CANDIDATES, Logprobs, VocabParallelSampler

_samplers: dict[tuple[Any, ...], VocabParallelSampler] = {}


def cached_sampler(
    shard: torch.Tensor, *, group: dist.ProcessGroup | None = None
) -> VocabParallelSampler:
    """The sampler the functions here use for ``shard`` (collective when it is new)."""
    return _cached(shard, group, _checked(shard, group)[0])


def _checked(shard: torch.Tensor, group: dist.ProcessGroup | None) -> tuple[int, int]:
    """``(M, V)`` of ``shard`` and ``group``, checked: a call's one check of its shard,
    before any collective."""
    m = checks.shard(shard)
    return m, checks.world(group) * shard.shape[1]


def _cached(shard: torch.Tensor, group: dist.ProcessGroup | None, m: int) -> VocabParallelSampler:
    """The sampler for a checked ``shard`` of ``m`` rows, its capacity grown past ``m``."""
    # The default group object changes when the process group is re-created.
    key = (dist.group.WORLD if group is None else group, shard.device, shard.shape[1])
    sampler = _samplers.get(key)
    if sampler is None:
        capacity = 1 << max(m - 1, 1).bit_length()
        sampler = VocabParallelSampler(shard.shape[1], capacity, shard.device, group)
        sampler.grow = True
        _samplers[key] = sampler
    sampler.state.fit(m)
    return sampler


def free_samplers() -> int:
    """Drops the samplers that the functions here cached in this process and returns how
    many. Local (no communication): call it on every rank before
    ``dist.destroy_process_group()``, as for any sampler or ``LogitsGather``."""
    n = len(_samplers)
    _samplers.clear()
    return n


def greedy(shard: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Global argmax ``[M]``; see :meth:`VocabParallelSampler.greedy`."""
    return _cached(shard, group, _checked(shard, group)[0]).greedy_rows(shard)


def sample(
    shard: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    top_k: int | torch.Tensor | None = None,
    top_p: float | torch.Tensor | None = None,
    min_p: float | torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Sampled token ids ``[M]``; see :meth:`VocabParallelSampler.sample`."""
    m, vocab = _checked(shard, group)
    args = checks.sample_args(m, vocab, shard.device, True, temperature, seed, positions,
                              top_k, top_p, min_p)  # fmt: skip
    return _cached(shard, group, m).sample_rows(shard, *args)


def logprobs(
    shard: torch.Tensor,
    token_ids: torch.Tensor,
    *,
    top_n: int = 0,
    group: dist.ProcessGroup | None = None,
) -> Logprobs:
    """Token logprobs and optional top-n; see :meth:`VocabParallelSampler.logprobs`."""
    m, vocab = _checked(shard, group)
    ids = checks.token_ids(token_ids, m, vocab, shard.device, True)
    n = checks.top_n(top_n, vocab)
    return _cached(shard, group, m).logprobs_rows(shard, ids, n)


__all__ = [
    "MAX_CANDIDATES",
    "Logprobs",
    "VocabParallelSampler",
    "cached_sampler",
    "free_samplers",
    "greedy",
    "logprobs",
    "reference",
    "sample",
]
