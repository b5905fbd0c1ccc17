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

from ..checks import resolve_options
from . import checks, reference
from .agreement import GREEDY, LOGPROBS, SAMPLE, Agreement, collective, settle
from .sampler import MAX_CANDIDATES, Logprobs, VocabParallelSampler

_samplers: dict[tuple[Any, ...], VocabParallelSampler] = {}
_agreements: dict[Any, Agreement] = {}


def cached_sampler(
    shard: torch.Tensor, *, group: dist.ProcessGroup | None = None
) -> VocabParallelSampler:
    """The sampler the functions here use for ``shard`` (collective when it is new)."""
    m = checks.shard(shard)
    checks.world(group)
    return _cached(shard, group, m)


def _agreement(group: dist.ProcessGroup | None, device: torch.device) -> Agreement | None:
    """The call check of the functions on ``group`` under ``LOGITS_GATHER_CHECK_CALLS=1``
    (built at the first call, on every rank), else None."""
    timeout_s, _, check_calls, _ = resolve_options(None, None, None)
    if not check_calls or dist.get_world_size(group) == 1:
        return None
    key = dist.group.WORLD if group is None else group
    if key not in _agreements:
        _agreements[key] = Agreement(group, timeout_s=timeout_s, device=device)
    return _agreements[key]


def _enter(
    op: int, shard: object, group: dist.ProcessGroup | None, parse=None
) -> tuple[int, tuple]:
    """A call's one check of its shard and arguments (``parse(m, vocab)``), before any
    collective but the agreement between ranks (:func:`.agreement.settle`)."""
    collective("logits_gather.sampling")
    world = checks.world(group)
    error, m, values = None, 0, ()
    try:
        m = checks.shard(shard)
        values = parse(m, world * shard.shape[1]) if parse is not None else ()
    except (TypeError, ValueError) as exc:
        error = exc
    device = shard.device if isinstance(shard, torch.Tensor) else torch.device("cpu")
    settle(_agreement(group, device), world, shard, error, op, values)
    return m, values


def _cached(shard: torch.Tensor, group: dist.ProcessGroup | None, m: int) -> VocabParallelSampler:
    """The sampler for a checked ``shard`` of ``m`` rows, its capacity grown past ``m``."""
    # The default group object changes when the process group is re-created.
    key = (dist.group.WORLD if group is None else group, shard.device, shard.shape[1])
    sampler = _samplers.get(key)
    if sampler is None:
        capacity = 1 << max(m - 1, 1).bit_length()
        try:
            sampler = VocabParallelSampler(shard.shape[1], capacity, shard.device, group)
        except ValueError as exc:  # the same on every rank: construction agrees first
            raise ValueError(
                "logits_gather.sampling: building the sampler for this call's shard (its "
                "capacity is M rounded up to a power of two) failed on every rank; every "
                f"rank must make the same calls with the same M and N. {exc}"
            ) from exc
        sampler.grow = True
        _samplers[key] = sampler
    sampler.state.fit(m)
    return sampler


def free_samplers() -> int:
    """Drops the samplers (and call checks) that the functions here cached in this process
    and returns how many samplers. Local (no communication): call it on every rank before
    ``dist.destroy_process_group()``, as for any sampler or ``LogitsGather``."""
    n = len(_samplers)
    _samplers.clear()
    _agreements.clear()
    return n


def greedy(shard: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Global argmax ``[M]``; see :meth:`VocabParallelSampler.greedy`."""
    m, _ = _enter(GREEDY, shard, group)
    return _cached(shard, group, m).greedy_rows(shard)


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
    args = (temperature, seed, positions, top_k, top_p, min_p)
    m, values = _enter(
        SAMPLE, shard, group, lambda m, v: checks.sample_args(m, v, shard.device, True, *args)
    )
    return _cached(shard, group, m).sample_rows(shard, *values)


def logprobs(
    shard: torch.Tensor,
    token_ids: torch.Tensor,
    *,
    top_n: int = 0,
    group: dist.ProcessGroup | None = None,
) -> Logprobs:
    """Token logprobs and optional top-n; see :meth:`VocabParallelSampler.logprobs`."""

    def parse(m: int, vocab: int) -> tuple:
        return checks.token_ids(token_ids, m, vocab, shard.device, True), checks.top_n(top_n, vocab)

    m, (ids, n) = _enter(LOGPROBS, shard, group, parse)
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
