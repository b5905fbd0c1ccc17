"""The symmetric-memory backend: slots, launch plan, views and the per-call dispatch.

Construction compiles every kernel variant the object can need (each launch
configuration of its plan, eager and graph mode, 16-byte aligned and unaligned
input) and freezes all launch arguments, so a call only reads the status word,
looks up its row count's plan entry, picks the slot and launches.

The launch plan maps each row count ``m`` to a configuration (tile bytes per
row, warps per CTA) and a grid. It is a pure function of arguments that every
rank shares (columns, dtype, capacity, CTA budget), so all ranks launch the same
grid for the same ``m``, which the barrier needs (see ``kernel.py``). How the
configurations were chosen is recorded in ``docs/design.md``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .checks import ON_TIMEOUT, PeerTimeoutError
from .launch import TritonLaunch, compile_kernel
from .slots import EAGER_SLOTS, SlotRotation
from .symmetric import PeerBuffers

MAX_WORLD = 8

_raw_stream = torch._C._cuda_getCurrentRawStream


@dataclass(frozen=True)
class Config:
    """One launch configuration: ``tile_bytes`` of a row per tile, ``warps`` per CTA,
    for every M up to ``up_to_m`` (None: any M)."""

    tile_bytes: int
    warps: int
    up_to_m: int | None = None


def default_configs(world_size: int) -> tuple[Config, ...]:
    """One configuration for every M: tiles of ``max(4096, 16384 // world_size)`` bytes,
    4 warps. Measured on 2 H200s (docs/design.md): at tp=2 8192-byte tiles were the
    fastest or tied at every M from 1 to 256; with 4 and 8 ranks (spread over the 2 GPUs)
    4096-byte tiles beat 8192 (M=1 under graph replay 6.04 vs 7.00 and 8.84 vs 10.40 us)
    and 2048 (7.04, 9.19). The grid is one CTA per tile, at most one per SM."""
    return (Config(max(4096, 16384 // world_size), 4),)


def make_plan(
    columns: int, item: int, capacity: int, ctas: int, configs: Sequence[Config]
) -> list[tuple[int, int]]:
    """``plan[m] = (config index, grid)``: the first configuration whose ``up_to_m``
    admits ``m``, and a grid of one CTA per tile, at most ``ctas``."""
    plan = [(0, 1)]
    for m in range(1, capacity + 1):
        i = next(
            (i for i, c in enumerate(configs) if c.up_to_m is None or m <= c.up_to_m),
            len(configs) - 1,
        )
        block = configs[i].tile_bytes // item
        plan.append((i, min(ctas, m * -(-columns // block))))
    return plan


class PushGather:
    """Callable ``[m, N]`` shard -> ``[m, W * N]`` view, through :mod:`.kernel`."""

    def __init__(
        self,
        buffers: PeerBuffers,
        *,
        columns: int,
        capacity: int,
        world_size: int,
        rank: int,
        device: torch.device,
        ctas: int,
        timeout_s: float,
        graphs: bool,
        on_timeout: str = "raise",
    ) -> None:
        if world_size > MAX_WORLD:
            raise ValueError(f"world_size {world_size} exceeds the kernel's {MAX_WORLD} ranks")
        if on_timeout not in ON_TIMEOUT:
            raise ValueError(f"on_timeout must be one of {ON_TIMEOUT}, got {on_timeout!r}")
        self._buffers = buffers
        self._index = device.index
        self._device = device
        self._graphs = graphs
        self._columns, self._capacity, self._ctas = columns, capacity, ctas
        self.on_timeout = on_timeout
        self._status = torch.zeros(4, dtype=torch.int32, pin_memory=True)
        self._status_words = (ctypes.c_int32 * 4).from_address(self._status.data_ptr())
        self._timeout_us = max(1, int(timeout_s * 1e6))
        self._constants = dict(
            N=columns, RANK=rank, WORLD=world_size, MAXC=ctas, TRAP=on_timeout == "trap"
        )
        self._tails = [self._args(s) for s in range(buffers.slots.shape[0])]
        self._views = [
            [buffers.slots[s, :m] for m in range(capacity + 1)]
            for s in range(buffers.slots.shape[0])
        ]
        self.slots = SlotRotation(graphs=graphs)
        self.replan(default_configs(world_size))

    def replan(self, configs: Sequence[Config]) -> None:
        """Compiles what ``configs`` need and rebuilds the plan. Local and deterministic:
        every rank must call it with the same arguments, between calls."""
        item = self._buffers.slots.element_size()
        plan = make_plan(self._columns, item, self._capacity, self._ctas, configs)
        compiled: dict[int, dict[tuple[bool, bool], TritonLaunch]] = {}
        for i in sorted({i for i, _ in plan[1:]}):
            cfg = configs[i]
            constants = dict(
                self._constants, BLOCK=cfg.tile_bytes // item, NUM_THREADS=cfg.warps * 32
            )
            compiled[i] = {}
            for graph in (False, True) if self._graphs else (False,):
                for aligned in (True, False):
                    ck = compile_kernel(
                        self._tails[0],
                        self._buffers.slots.dtype,
                        aligned=aligned,
                        device=self._device,
                        timeout_us=self._timeout_us,
                        num_warps=cfg.warps,
                        constants=dict(constants, GRAPH=graph),
                    )
                    compiled[i][graph, aligned] = TritonLaunch(ck, self._tails, self._timeout_us)
        self.plan = [(configs[i], grid) for i, grid in plan]
        self._plan = [(grid, compiled.get(i)) for i, grid in plan]

    def _args(self, slot: int) -> tuple[int, ...]:
        """Frozen pointer arguments after ``src``: the 8 slot addresses (unused
        ones repeat rank 0's), the flag tables and the status block."""
        bases = self._buffers.slot_bases[slot]
        dsts = tuple(bases) + (bases[0],) * (MAX_WORLD - len(bases))
        return (
            *dsts,
            self._buffers.flags.data_ptr(),
            self._buffers.peer_flags.data_ptr(),
            self._status.data_ptr(),
        )

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        if self._status_words[0]:
            raise self.timeout_error()
        ptr = shard.data_ptr()
        m = shard.shape[0]
        grid, launches = self._plan[m]
        slot = self.slots.take()
        launches[slot >= EAGER_SLOTS, not ptr & 15](grid, _raw_stream(self._index), ptr, slot, m)
        return self._views[slot][m]

    # The fused LM head (logits_gather.head) shares the slots, the rotation and the flags:
    # one of its calls is one call of the protocol.
    @property
    def ctas(self) -> int:
        """The CTA budget: the most CTAs any kernel of this object may launch."""
        return self._ctas

    def take_slot(self) -> int:
        """The slot of the next call (eager rotation, or graph-mode alternation)."""
        if self._status_words[0]:
            raise self.timeout_error()
        return self.slots.take()

    def slot_args(self, slot: int) -> tuple[int, ...]:
        """The frozen pointer arguments of ``slot``: 8 slot addresses, flags, peer flag
        table, status block (what the push kernel takes after ``src``)."""
        return self._tails[slot]

    def view(self, slot: int, m: int) -> torch.Tensor:
        return self._views[slot][m]

    @property
    def kernel_constants(self) -> dict[str, int]:
        """``RANK``, ``WORLD``, ``MAXC``, ``TRAP`` (and ``N``) as the push kernel gets them."""
        return dict(self._constants)

    @property
    def timeout_us(self) -> int:
        return self._timeout_us

    def recorded_timeout(self) -> PeerTimeoutError | None:
        """The timeout the kernel wrote into its pinned status block, or None."""
        return self.timeout_error() if self._status_words[0] else None

    def timeout_error(self) -> PeerTimeoutError:
        code, cta, seen, target = list(self._status_words)
        where = "entry handshake (graph mode)" if code == 2 else "exit barrier"
        if self.on_timeout == "trap":
            after = (
                "the kernel trapped (on_timeout='trap'), so the CUDA context is unusable and "
                "no later work read incomplete data; restart the process"
            )
        else:
            after = (
                "the timed-out call returned incomplete data (on_timeout='raise'), and this "
                "object is unusable now"
            )
        return PeerTimeoutError(
            f"LogitsGather timed out at the {where}: CTA {cta} saw flag {seen}, needed {target}. "
            f"A peer rank is dead, stalled, or issued a different sequence of calls; {after} "
            "(raise timeout_s or LOGITS_GATHER_TIMEOUT_S if peers are just slow)."
        )
