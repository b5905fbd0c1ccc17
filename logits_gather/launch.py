"""The symmetric-memory backend: compiled kernels, frozen arguments, cheap launches.

Triton's JIT dispatch costs 10-20 us of host time per call; this module pays it
once. Construction compiles every variant the object can need (eager and graph,
16-byte aligned and unaligned input) and freezes all arguments except the input
address and ``m``. A call then reads a status word, picks the slot, and hands the
packed arguments straight to the compiled launcher.
"""

from __future__ import annotations

import ctypes
import logging

import torch

from . import kernel as K
from .checks import PeerTimeoutError
from .symmetric import PeerBuffers

log = logging.getLogger(__name__)

EAGER_SLOTS = 3
GRAPH_SLOTS = 2
NUM_WARPS = 4
VECTORS_PER_THREAD = 2
MAX_WORLD = 8
_TRITON_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

_capturing = torch._C._cuda_isCurrentStreamCapturing
_raw_stream = torch._C._cuda_getCurrentRawStream


class _Ptr:
    """Stands in for a tensor while compiling: Triton specialises pointer
    arguments on ``data_ptr() % 16``, and that is all it reads."""

    def __init__(self, addr: int, dtype: torch.dtype) -> None:
        self._addr, self.dtype = addr, dtype

    def data_ptr(self) -> int:
        return self._addr


class PushGather:
    """Callable ``[m, N]`` shard -> ``[m, W * N]`` view, through :mod:`.kernel`."""

    def __init__(self, buffers: PeerBuffers, *, columns: int, capacity: int, world_size: int,
                 rank: int, dtype: torch.dtype, device: torch.device, ctas: int,
                 timeout_s: float, graphs: bool) -> None:
        if world_size > MAX_WORLD:
            raise ValueError(f"world_size {world_size} exceeds the kernel's {MAX_WORLD} ranks")
        self._buffers = buffers
        self._device = device
        self._capacity = capacity
        self._graphs = graphs
        self._status = torch.zeros(4, dtype=torch.int32, pin_memory=True)
        self._status_words = (ctypes.c_int32 * 4).from_address(self._status.data_ptr())
        block = VECTORS_PER_THREAD * NUM_WARPS * 32 * 16 // buffers.slots.element_size()
        tiles_per_row = -(-columns // block)
        self._grid = [min(ctas, m * tiles_per_row) for m in range(capacity + 1)]
        self._timeout_us = max(1, int(timeout_s * 1e6))
        constants = dict(N=columns, RANK=rank, WORLD=world_size, MAXC=ctas, BLOCK=block,
                         NUM_THREADS=NUM_WARPS * 32)
        self._kernels = {}
        for graph in (False, True) if graphs else (False,):
            for aligned in (True, False):
                self._kernels[graph, aligned] = self._compile(constants, graph, aligned)
        self._views = [[buffers.slots[s, :m] for m in range(capacity + 1)]
                       for s in range(buffers.slots.shape[0])]
        self._eager = 0
        self._captured = 0

    def _args(self, slot: int) -> tuple[object, ...]:
        """Frozen pointer arguments after ``src``: the 8 slot addresses (unused
        ones repeat rank 0's), the flag tables and the status block."""
        bases = self._buffers.slot_bases[slot]
        dsts = tuple(bases) + (bases[0],) * (MAX_WORLD - len(bases))
        return (*dsts, self._buffers.flags.data_ptr(), self._buffers.peer_flags.data_ptr(),
                self._status.data_ptr())

    def _compile(self, constants: dict[str, int], graph: bool, aligned: bool):
        dtype = self._buffers.slots.dtype
        ptrs = [_Ptr(a, dtype) for a in self._args(0)[:MAX_WORLD]]
        ptrs += [self._buffers.flags, self._buffers.peer_flags, _Ptr(self._status.data_ptr(),
                                                                      torch.int32)]
        src = _Ptr(16 if aligned else 2, dtype)
        with torch.cuda.device(self._device):
            ck = K.push_gather_kernel.warmup(src, *ptrs, 1, self._timeout_us, GRAPH=graph,
                                             grid=(1,), num_warps=NUM_WARPS, **constants)
            ck._init_handles()
        launcher = ck.run
        if getattr(launcher, "global_scratch_size", 0) or getattr(launcher, "profile_scratch_size",
                                                                   0):
            raise RuntimeError("push_gather_kernel unexpectedly needs scratch memory")
        n_const = sum(1 for v in ck.src.signature.values() if v == "constexpr")
        head = (ck.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                ck.packed_metadata, None, None, None)
        tails = [self._args(s) for s in range(EAGER_SLOTS + (GRAPH_SLOTS if self._graphs else 0))]
        return launcher.launch, head, tails, (None,) * n_const

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        if self._status_words[0]:
            raise self.timeout_error()
        m = shard.shape[0]
        ptr = shard.data_ptr()
        if _capturing():
            if not self._graphs:
                raise RuntimeError("this LogitsGather was built with graphs=False; build it with "
                                   "graphs=True to call it during CUDA graph capture")
            slot = EAGER_SLOTS + (self._captured & 1)
            self._captured += 1
            launch, head, tails, consts = self._kernels[True, not ptr & 15]
        else:
            slot = self._eager
            self._eager = (slot + 1) % EAGER_SLOTS
            launch, head, tails, consts = self._kernels[False, not ptr & 15]
        launch(self._grid[m], 1, 1, _raw_stream(self._device.index), *head, ptr, *tails[slot], m,
               self._timeout_us, *consts)
        return self._views[slot][m]

    def timeout_error(self) -> PeerTimeoutError:
        code, cta, seen, target = list(self._status_words)
        where = "entry handshake (graph mode)" if code == 2 else "exit barrier"
        return PeerTimeoutError(
            f"LogitsGather timed out at the {where}: CTA {cta} saw flag {seen}, needed {target}. "
            "A peer rank is dead, stalled, or issued a different sequence of calls; this object "
            "is unusable now (raise timeout_s or LOGITS_GATHER_TIMEOUT_S if peers are just slow).")
