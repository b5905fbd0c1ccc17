"""Vocab-parallel greedy, sampling and logprobs without gathering the logits.

Each rank holds ``shard`` ``[M, N]``: columns ``rank * N .. rank * N + N - 1`` of
the ``[M, W * N]`` logits. Each operation reduces its shard locally, exchanges a
few values per row and merges them identically on every rank: on GPUs inside the
fused Triton kernels, through symmetric-memory mailboxes (:mod:`.fused`,
:mod:`.kernels`); elsewhere, and for rows the kernels cannot decide, through small
:class:`~logits_gather.LogitsGather` all-gathers (:mod:`.exact`).

- :func:`greedy` equals ``torch.argmax`` of the gathered logits (ties: lowest
  id; NaN: the first NaN).
- :func:`sample` equals :func:`reference.sample` on the gathered logits bit for
  bit at every tp: vLLM's V2 sampling (Gumbel-max with murmur3 noise keyed by
  ``(seed[i], positions[i], global token id)``, ``x / T``, min-p), then an exact
  top-k and top-p of our own, each a scalar or per row (the definition and every
  tie rule: :mod:`.reference`; which path serves which call: :mod:`.sampler`).
- :func:`logprobs` is within ``1e-6 * (1 + |ref|)`` of the exact log_softmax and
  within ``2e-5 * (1 + |ref|)`` of ``torch.log_softmax(gathered.float(), 1)``.

The module functions use a :class:`VocabParallelSampler` cached per
``(group, device, N)``. Its first use, a larger ``M`` than seen so far, and a
new ``top_k``/``top_n`` build mailboxes or exchanges collectively: every rank must
make the same calls with the same ``M``, ``top_k`` and ``top_n``. For CUDA graphs,
build a :class:`VocabParallelSampler` yourself and run each variant once before
capture.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from . import checks, reference
from .exact import exchange
from .sampler import MAX_CANDIDATES, Logprobs, VocabParallelSampler

_samplers: dict[tuple[Any, ...], VocabParallelSampler] = {}


def _world(group: dist.ProcessGroup | None) -> int:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "logits_gather.sampling needs torch.distributed to be initialised "
            "(call torch.distributed.init_process_group first)"
        )
    return dist.get_world_size(group)


def cached_sampler(
    shard: torch.Tensor, group: dist.ProcessGroup | None = None
) -> VocabParallelSampler:
    """The sampler the module functions use for ``shard``; collective when it is new."""
    _world(group)
    return _cached(shard, group, checks.shard(shard))


def _cached(shard: torch.Tensor, group: dist.ProcessGroup | None, m: int) -> VocabParallelSampler:
    key = (exchange.group_key(group), shard.device, shard.shape[1])
    sampler = _samplers.get(key)
    if sampler is None:
        capacity = 1 << max(m - 1, 1).bit_length()
        sampler = VocabParallelSampler(shard.shape[1], capacity, shard.device, group)
        sampler.grow = True
        _samplers[key] = sampler
    return sampler


def greedy(shard: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Global argmax ``[M]`` of the gathered logits; see :meth:`VocabParallelSampler.greedy`."""
    _world(group)
    return _cached(shard, group, checks.shard(shard)).greedy(shard)


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
    m = checks.shard(shard)
    vocab = _world(group) * shard.shape[1]
    dev = shard.device
    t = checks.temperature(temperature, m, dev, True)
    seeds = checks.seed(seed, m, dev)
    pos = checks.positions(positions, m, dev)
    k = checks.top_k(top_k, m, vocab, dev)
    p = checks.top_p(top_p, m, dev)
    mp = checks.min_p(min_p, m, dev)
    sampler = _cached(shard, group, m)
    sampler.rows(shard)
    return sampler.sample_rows(shard, t, seeds, pos, k, p, mp)


def logprobs(
    shard: torch.Tensor,
    token_ids: torch.Tensor,
    *,
    top_n: int = 0,
    group: dist.ProcessGroup | None = None,
) -> Logprobs:
    """Token logprobs and optional top-n; see :meth:`VocabParallelSampler.logprobs`."""
    m = checks.shard(shard)
    vocab = _world(group) * shard.shape[1]
    ids = checks.token_ids(token_ids, m, vocab, shard.device, True)
    n = checks.top_n(top_n, vocab)
    sampler = _cached(shard, group, m)
    sampler.rows(shard)
    return sampler.logprobs_rows(shard, ids, n)


__all__ = [
    "MAX_CANDIDATES",
    "Logprobs",
    "VocabParallelSampler",
    "cached_sampler",
    "greedy",
    "logprobs",
    "reference",
    "sample",
]
