"""The symmetric-memory backend: slots, views and the per-call dispatch.

Construction compiles every kernel variant the object can need (eager and graph
mode, 16-byte aligned and unaligned input) and freezes all launch arguments, so
a call only reads the status word, picks the slot and launches.
"""

from __future__ import annotations

import ctypes

import torch

from .checks import PeerTimeoutError
from .launch import NUM_WARPS, TritonLaunch, compile_kernel
from .symmetric import PeerBuffers

EAGER_SLOTS = 3
GRAPH_SLOTS = 2
VECTORS_PER_THREAD = 2
MAX_WORLD = 8

_capturing = torch._C._cuda_isCurrentStreamCapturing
_raw_stream = torch._C._cuda_getCurrentRawStream


class PushGather:
    """Callable ``[m, N]`` shard -> ``[m, W * N]`` view, through :mod:`.kernel`."""

    def __init__(self, buffers: PeerBuffers, *, columns: int, capacity: int, world_size: int,
                 rank: int, device: torch.device, ctas: int, timeout_s: float,
                 graphs: bool) -> None:
        if world_size > MAX_WORLD:
            raise ValueError(f"world_size {world_size} exceeds the kernel's {MAX_WORLD} ranks")
        self._buffers = buffers
        self._index = device.index
        self._graphs = graphs
        self._status = torch.zeros(4, dtype=torch.int32, pin_memory=True)
        self._status_words = (ctypes.c_int32 * 4).from_address(self._status.data_ptr())
        item = buffers.slots.element_size()
        block = VECTORS_PER_THREAD * NUM_WARPS * 32 * 16 // item
        tiles_per_row = -(-columns // block)
        self._grid = [min(ctas, m * tiles_per_row) for m in range(capacity + 1)]
        timeout_us = max(1, int(timeout_s * 1e6))
        constants = dict(N=columns, RANK=rank, WORLD=world_size, MAXC=ctas, BLOCK=block,
                         NUM_THREADS=NUM_WARPS * 32)
        tails = [self._args(s) for s in range(buffers.slots.shape[0])]
        self._launch = {}
        for graph in (False, True) if graphs else (False,):
            for aligned in (True, False):
                ck = compile_kernel(tails[0], buffers.slots.dtype, aligned=aligned,
                                    device=device, timeout_us=timeout_us,
                                    constants=dict(constants, GRAPH=graph))
                self._launch[graph, aligned] = TritonLaunch(ck, tails, timeout_us)
        self._views = [[buffers.slots[s, :m] for m in range(capacity + 1)]
                       for s in range(buffers.slots.shape[0])]
        self._eager = 0
        self._captured = 0

    def _args(self, slot: int) -> tuple[int, ...]:
        """Frozen pointer arguments after ``src``: the 8 slot addresses (unused
        ones repeat rank 0's), the flag tables and the status block."""
        bases = self._buffers.slot_bases[slot]
        dsts = tuple(bases) + (bases[0],) * (MAX_WORLD - len(bases))
        return (*dsts, self._buffers.flags.data_ptr(), self._buffers.peer_flags.data_ptr(),
                self._status.data_ptr())

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        if self._status_words[0]:
            raise self.timeout_error()
        ptr = shard.data_ptr()
        if _capturing():
            if not self._graphs:
                raise RuntimeError("this LogitsGather was built with graphs=False; build it with "
                                   "graphs=True to call it during CUDA graph capture")
            slot = EAGER_SLOTS + (self._captured & 1)
            self._captured += 1
            launch = self._launch[True, not ptr & 15]
        else:
            slot = self._eager
            self._eager = (slot + 1) % EAGER_SLOTS
            launch = self._launch[False, not ptr & 15]
        m = shard.shape[0]
        launch(self._grid[m], _raw_stream(self._index), ptr, slot, m)
        return self._views[slot][m]

    def timeout_error(self) -> PeerTimeoutError:
        code, cta, seen, target = list(self._status_words)
        where = "entry handshake (graph mode)" if code == 2 else "exit barrier"
        return PeerTimeoutError(
            f"LogitsGather timed out at the {where}: CTA {cta} saw flag {seen}, needed {target}. "
            "A peer rank is dead, stalled, or issued a different sequence of calls; this object "
            "is unusable now (raise timeout_s or LOGITS_GATHER_TIMEOUT_S if peers are just slow).")
