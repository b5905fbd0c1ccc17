"""Small all-gathers of ``[M, width]`` fp32 payloads, one ``LogitsGather`` per width.

Off the fused path (CPU, no peer access, the filters the fused kernels do not
cover), every exchange of a few values per row goes through these. The exchange
is a :class:`~logits_gather.LogitsGather` of dtype fp32, which copies
bits exactly, so a payload may hold int64 indices (``payload.view(torch.int64)``)
or bf16/fp16 values (``payload.view(dtype)``) next to fp32 ones. On GPUs that
can map each other's memory this is the symmetric-memory push kernel; elsewhere
the torch.distributed fallback, behind the same call.

Building a ``LogitsGather`` is collective, so :func:`get` may only be reached
by every rank of the group together, with the same ``width`` and ``rows``.
The cache is keyed by ``(group, device, width, backend)`` and shared by every
sampler; an exchange that is too small for ``rows`` is replaced by a larger one
(capacity doubles), and the old one is kept alive, because a peer may still be
reading from it. Nothing is built while a CUDA graph is being captured.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist

from ...gather import LogitsGather

log = logging.getLogger(__name__)

_cache: dict[tuple[Any, ...], Exchange] = {}
_retired: list[Exchange] = []


class Exchange:
    """A ``LogitsGather`` of fp32 ``[rows, width]`` plus the payload it sends."""

    def __init__(
        self,
        width: int,
        capacity: int,
        group: dist.ProcessGroup | None,
        device: torch.device,
        backend: str,
    ) -> None:
        self.gather = LogitsGather(
            columns=width,
            capacity=capacity,
            device=device,
            group=group,
            dtype=torch.float32,
            backend=backend,
        )
        self.width = width
        self.capacity = capacity
        self.world_size = self.gather.world_size
        self.payload = torch.empty(capacity, width, dtype=torch.float32, device=device)

    @property
    def backend(self) -> str:
        return self.gather.backend

    def send(self, rows: int) -> torch.Tensor:
        """All-gathers ``payload[:rows]``; returns every rank's payload as ``[rows, W, width]``.

        The result is a view of the gather's buffer: consume it before the
        next-but-one call of this exchange (stream order is enough).
        """
        return self.gather(self.payload[:rows]).view(rows, self.world_size, self.width)


def group_key(group: dist.ProcessGroup | None) -> Any:
    # The default group object changes when the process group is re-created.
    return dist.group.WORLD if group is None else group


def capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def get(
    width: int,
    rows: int,
    group: dist.ProcessGroup | None,
    device: torch.device,
    backend: str = "auto",
    *,
    capacity: int | None = None,
) -> Exchange:
    """The cached exchange for ``(group, device, width, backend)`` with room for ``rows``.

    Collective when it has to build: ``capacity`` (default: the next power of
    two >= ``rows``, at least twice the old capacity) is then the new size.
    """
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
    if capacity is None:
        capacity = 1 << max(rows - 1, 1).bit_length()
        if ex is not None:
            capacity = max(capacity, 2 * ex.capacity)
    capacity = max(capacity, rows)
    new = Exchange(width, capacity, group, device, backend)
    if ex is not None:
        _retired.append(ex)
        log.debug("logits_gather.sampling: width-%d exchange grown to capacity %d", width, capacity)
    _cache[key] = new
    return new


__all__ = ["Exchange", "get"]
