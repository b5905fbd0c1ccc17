"""Small all-gathers of ``[M, width]`` fp32 payloads through a fp32
:class:`~logits_gather.LogitsGather`, which copies bits: int64 or bf16/fp16 fields travel
as views. Building one is collective (every rank, the same ``width`` and ``rows``, never
during capture). Exchanges are shared by every sampler per ``(group, device, width,
backend)``; a grown one keeps the old alive, since a peer may still read it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ...gather import LogitsGather
from ..checks import capturing

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
    _cache[key] = new = Exchange(width, max(capacity, rows), group, device, backend)
    return new
