"""Compiling and launching the fused head kernel; the slots it writes at world size 1.

The first eager call with a given hidden size compiles every tile the object can need
for it (``table.tiles``: each ``M`` bucket up to the capacity; eager and graph mode),
loads the modules, and agrees with every rank that all of them succeeded before any
rank launches one: a module load waits for the GPU to drain, and on a shared GPU a
peer's kernel may be spinning for this rank's. A failure anywhere routes that hidden
size to cuBLAS + the gather on every rank. Calls then go through Triton's C launcher
with frozen arguments (``launch.raw_launch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..launch import Ptr, raw_launch
from ..push import MAX_WORLD as LANES
from ..slots import EAGER_SLOTS, SlotRotation, slot_count
from . import kernel as HK
from .table import Tile, tiles

_capturing = torch._C._cuda_isCurrentStreamCapturing
_raw_stream = torch._C._cuda_getCurrentRawStream


class LocalSlots:
    """World size 1: the same slot rotation as the push gather, in plain device memory
    (allocated once, at the first fused call), and no barrier."""

    def __init__(self, capacity: int, columns: int, dtype: torch.dtype, device: torch.device):
        self.ctas = torch.cuda.get_device_properties(device).multi_processor_count
        self._slots = torch.empty((slot_count(True), capacity, columns), dtype=dtype, device=device)
        self._unused = torch.zeros(LANES, dtype=torch.int64, device=device)
        self._rotation = SlotRotation(graphs=True)
        self.kernel_constants = dict(N=columns, RANK=0, WORLD=1, MAXC=1, TRAP=False)
        self.timeout_us = 1
        unused = self._unused.data_ptr()
        self._args = [
            (self._slots[s].data_ptr(),) * LANES + (unused,) * 3 for s in range(len(self._slots))
        ]

    def take_slot(self) -> int:
        return self._rotation.take()

    def slot_args(self, slot: int) -> tuple[int, ...]:
        return self._args[slot]

    def view(self, slot: int, m: int) -> torch.Tensor:
        return self._slots[slot, :m]


class HeadLaunch:
    """One compiled variant, launched with every argument but the inputs, slot and M frozen."""

    def __init__(self, ck: Any, tail: tuple) -> None:
        self._launch, self._head, n_const = raw_launch(ck)
        self._end = tail + (None,) * n_const

    def __call__(self, grid: int, stream: int, x: int, w: int, args: tuple, m: int) -> None:
        self._launch(grid, 1, 1, stream, *self._head, x, w, *args, m, *self._end)


def compile_variant(
    slots: Any, tile: Tile, hidden_size: int, dtype: torch.dtype, device: torch.device, graph: bool
) -> HeadLaunch:
    c = slots.kernel_constants
    columns = c["N"]
    *dsts, flags, peer_flags, status = slots.slot_args(0)
    ptrs = [Ptr(a, dtype) for a in dsts]
    ptrs += [Ptr(flags, torch.int32), Ptr(peer_flags, torch.int64), Ptr(status, torch.int32)]
    x, w = Ptr(16, dtype), Ptr(16, dtype)
    constants = dict(
        RANK=c["RANK"],
        WORLD=c["WORLD"],
        MAXC=c["MAXC"],
        TRAP=c["TRAP"],
        BM=tile.bm,
        BN=tile.bn,
        BK=tile.bk,
        STAGES=tile.stages,
        GRAPH=graph,
        NUM_THREADS=tile.warps * 32,
    )
    tail = (columns, hidden_size, slots.timeout_us)
    with torch.cuda.device(device):
        ck = HK.head_kernel.warmup(
            x, w, *ptrs, 1, *tail, grid=(1,), num_warps=tile.warps, **constants
        )
        ck._init_handles()
    if ck.run.global_scratch_size or ck.run.profile_scratch_size:
        raise RuntimeError("head_kernel unexpectedly needs scratch memory")
    return HeadLaunch(ck, tail)


class FusedHead:
    """Runs ``linear`` through the fused kernel on ``slots`` (a ``PushGather`` or
    :class:`LocalSlots`). ``agree(failure) -> [every rank's failure]`` is collective."""

    def __init__(
        self,
        slots: Any,
        *,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
        graphs: bool,
        agree: Callable[[str | None], list[str | None]],
    ) -> None:
        self._slots, self._capacity, self._dtype, self._device = slots, capacity, dtype, device
        self._graphs, self._agree = graphs, agree
        self._columns = slots.kernel_constants["N"]
        self._launches: dict[tuple[int, Tile, bool], HeadLaunch] = {}
        self._ready: dict[int, str] = {}  # hidden size -> '' (compiled) or why not

    def prepare(self, hidden_size: int) -> str:
        """Compiles every variant for ``hidden_size`` (collective at first use); returns
        '' when they are ready on every rank, else why not (the same on every rank)."""
        if hidden_size in self._ready:
            return self._ready[hidden_size]
        if _capturing():
            raise RuntimeError(
                f"LogitsGather.linear: the first call with hidden size {hidden_size} compiles "
                "the fused kernel and cannot be captured; make one eager call first"
            )
        failure = None
        try:
            for tile in tiles(self._capacity, hidden_size, self._columns):
                self.compile(hidden_size, tile)
        except Exception as exc:  # noqa: BLE001 - agreed below, then cuBLAS everywhere
            failure = f"{type(exc).__name__}: {exc}"
        every = self._agree(failure)
        bad = [f"rank {r}: {f}" for r, f in enumerate(every) if f]
        self._ready[hidden_size] = (
            "the fused kernel failed to compile: " + "; ".join(bad) if bad else ""
        )
        return self._ready[hidden_size]

    def compile(self, hidden_size: int, tile: Tile) -> None:
        """Compiles and loads ``tile``'s variants (local; ``prepare`` agrees on them)."""
        for graph in (False, True) if self._graphs else (False,):
            if (hidden_size, tile, graph) not in self._launches:
                self._launches[hidden_size, tile, graph] = compile_variant(
                    self._slots, tile, hidden_size, self._dtype, self._device, graph
                )

    def __call__(self, hidden: torch.Tensor, weight: torch.Tensor, tile: Tile) -> torch.Tensor:
        m, h = hidden.shape
        slots = self._slots
        slot = slots.take_slot()
        launch = self._launches[h, tile, self._graphs and slot >= EAGER_SLOTS]
        grid = tile.grid(m, self._columns, slots.ctas)
        launch(
            grid,
            _raw_stream(self._device.index),
            hidden.data_ptr(),
            weight.data_ptr(),
            slots.slot_args(slot),
            m,
        )
        return slots.view(slot, m)
