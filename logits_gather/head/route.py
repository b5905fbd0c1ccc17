"""Which way one ``LogitsGather.linear`` call goes: the fused kernel, or cuBLAS + the gather.

The choice depends only on what every rank shares (the object, ``M``, the hidden size and
``fused``), so every rank makes the same one, and the fused kernel's first use for a
hidden size (its compilation) is collective. ``fused=None`` follows the tile table
(``table.py``) and logs once why a call cannot be fused; ``fused=True`` raises instead,
and takes the fused kernel even where the table prefers cuBLAS; ``fused=False`` never
takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..logs import log_once
from .checks import log, unfusable
from .table import Tile, pick


class HeadRoute:
    """``choose(m, h, fused)`` -> a tile (fused kernel) or None (cuBLAS + gather).

    ``slots``: the push gather (world size > 1, kernel backend), or None to use
    :class:`.fused.LocalSlots` at world size 1; ``kernel``: why this object has no kernel
    (None if it has one); ``agree(failure)`` exchanges a failure with every rank."""

    def __init__(
        self,
        *,
        slots: Any,
        kernel: str | None,
        columns: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
        graphs: bool,
        agree: Callable[[str | None], list[str | None]],
    ) -> None:
        self._slots, self._kernel = slots, kernel
        self._columns, self._capacity, self._dtype = columns, capacity, dtype
        self._device, self._graphs, self._agree = device, graphs, agree
        self._fused: Any = None

    @property
    def fused(self) -> Any:
        """The :class:`.fused.FusedHead` (built at first use)."""
        if self._fused is None:
            from .fused import FusedHead, LocalSlots

            slots = self._slots
            if slots is None:
                slots = LocalSlots(self._capacity, self._columns, self._dtype, self._device)
            self._fused = FusedHead(
                slots,
                capacity=self._capacity,
                dtype=self._dtype,
                device=self._device,
                graphs=self._graphs,
                agree=self._agree,
            )
        return self._fused

    def choose(self, m: int, hidden_size: int, fused: bool | None) -> Tile | None:
        if fused is False:
            return None
        why = unfusable(
            hidden_size=hidden_size, columns=self._columns, dtype=self._dtype, kernel=self._kernel
        )
        if not why:
            why = self.fused.prepare(hidden_size)
        if why:
            if fused:
                raise ValueError(f"LogitsGather.linear(fused=True) is impossible here: {why}")
            log_once(log, f"LogitsGather.linear: F.linear (cuBLAS) + the gather, because {why}")
            return None
        tile = pick(m, hidden_size, self._columns, forced=bool(fused))
        if tile is None:
            log_once(
                log,
                f"LogitsGather.linear: F.linear (cuBLAS) + the gather for some M at "
                f"H={hidden_size}, columns={self._columns}, where the tile table found cuBLAS "
                "faster (logits_gather/head/table.py)",
            )
        return tile


def kernel_problem(*, world_size: int, backend: str, device: torch.device) -> str | None:
    """Why a ``LogitsGather`` with this world size, backend and device has no fused kernel
    at all (None if it has one): the kernel needs the symmetric-memory backend, or at
    world size 1 a device on which that backend could run."""
    from ..symmetric import local_problem

    if world_size == 1:
        problem = local_problem(device)
        if problem is None and backend != "symm_mem":
            problem = "backend='torch.distributed' was requested"
        return problem
    if backend != "symm_mem":
        return "this object runs the torch.distributed fallback"
    return None


def planned_path(
    m: int, hidden_size: int, *, columns: int, dtype: torch.dtype, kernel: str | None
) -> str:
    """The route ``linear(fused=None)`` takes for such a call, in words, as the table
    decides it (a fused kernel that then fails to compile also ends in cuBLAS, logged)."""
    why = unfusable(hidden_size=hidden_size, columns=columns, dtype=dtype, kernel=kernel)
    if why:
        return f"cuBLAS+gather ({why})"
    tile = pick(m, hidden_size, columns)
    if tile is None:
        return "cuBLAS+gather (tile table)"
    return f"fused {tile.bm}x{tile.bn}x{tile.bk}"
