"""Small all-gathers of ``[M, width]`` fp32 payloads: a fp32
:class:`~logits_gather.LogitsGather` (the symmetric-memory kernel where GPUs map their
peers' memory, else torch.distributed) copies bits, so a payload may carry int64 or
bf16/fp16 fields as views.

Building one is collective: :func:`get` must be reached by every rank together with the
same ``width`` and ``rows``, and never during CUDA graph capture. The cache, keyed by
``(group, device, width, backend)``, is shared by every sampler; a grown exchange keeps
the old one alive, since a peer may still be reading it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist

from ...gather import LogitsGather
from ..checks import capturing

log = logging.getLogger(__name__)

_cache: dict[tuple[Any, ...], Exchange] = {}
_retired: list[Exchange] = []


class Exchange:
    """A fp32 ``LogitsGather`` of ``[capacity, width]`` and the ``payload`` it sends."""

    def __init__(self, width: int, capacity: int, group, device: torch.device, backend: str):
        self.gather = LogitsGather(width, capacity, device, group, torch.float32, backend)
        self.width, self.capacity = width, capacity
        self.world_size = self.gather.world_size
        self.payload = torch.empty(capacity, width, dtype=torch.float32, device=device)

    def send(self, rows: int) -> torch.Tensor:
        """Every rank's ``payload[:rows]`` as ``[rows, W, width]``: a view of the gather's
        buffer, valid until the next-but-one call (stream order is enough)."""
        return self.gather(self.payload[:rows]).view(rows, self.world_size, self.width)


def group_key(group: dist.ProcessGroup | None) -> Any:
    # The default group object changes when the process group is re-created.
    return dist.group.WORLD if group is None else group


def get(width: int, rows: int, group, device: torch.device, backend: str, capacity: int):
    """The cached exchange for ``(group, device, width, backend)`` with room for ``rows``;
    collective when it has to build one of ``max(capacity, rows)`` rows."""
    key = (group_key(group), device, width, backend)
    ex = _cache.get(key)
    if ex is not None and ex.capacity >= rows:
        return ex
    if capturing(device):
        have = "none" if ex is None else f"capacity {ex.capacity}"
        raise RuntimeError(
            f"logits_gather.sampling: no exchange of width {width} for {rows} rows ({have}); "
            "it is built collectively on first use, which cannot happen inside CUDA graph "
            "capture: run the same operation (same top_k/top_n, M >= this M) once before capture"
        )
    if ex is not None:
        _retired.append(ex)
        log.debug("logits_gather.sampling: width-%d exchange grown to %d rows", width, capacity)
    _cache[key] = new = Exchange(width, max(capacity, rows), group, device, backend)
    return new


__all__ = ["Exchange", "capturing", "get", "group_key"]
