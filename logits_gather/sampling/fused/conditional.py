"""A CUDA graph IF node around captured work, through the CUDA driver API (ctypes).

PyTorch releases before conditional nodes reached ``torch.cuda.CUDAGraph`` (2.11 has
none) cannot skip captured work on a device flag. :func:`capture_if` adds the node to
the capture in progress on the current stream:

1. a one-thread kernel (NVRTC, via ``torch.cuda._compile_kernel``) sets the node's
   handle from a ``bool [1]`` tensor on every replay (the handle resets to 0 first).
   The handle travels as two 32-bit kernel arguments (``_compile_kernel`` passes ints
   as C ints), so no captured fill kernel has to store it on the device;
2. the IF node joins the capture's dependencies, and the capture continues after it;
3. ``body`` is captured into the node's child graph on a side stream; its allocations
   go to a memory pool kept alive by the caller (:class:`Conditional`), so no block the
   child graph uses returns to the general cache. The side streams are the
   :class:`Conditional`'s own, one per nesting level, created with it: a stream from
   torch's pool (``torch.cuda.Stream()`` hands its 32 streams out in turn) is at times
   the very stream whose capture is in progress, and beginning a capture on it fails
   (``CUresult 401``: measured on every capture of 20 top-p calls, 40 IF nodes,
   and on 2 of 18 captures of 1 to 3 calls).

Requirements: a driver with conditional nodes (CUDA >= 12.4), NVRTC, and a capture
started on this thread. :func:`Conditional.problem` says why one cannot be used.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

_SOURCE = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);
extern "C" __global__ void logits_gather_set_if(unsigned int low, unsigned int high,
                                                const bool* flag) {
  cudaGraphConditionalHandle handle = ((unsigned long long)high << 32) | low;
  cudaGraphSetConditional(handle, flag[0] ? 1u : 0u);
}
"""
_NODE_CONDITIONAL, _COND_IF, _ASSIGN_DEFAULT = 13, 0, 1
_SET_DEPENDENCIES, _THREAD_LOCAL, _ACTIVE = 1, 1, 1
_NON_BLOCKING = 1
DEPTH = 4
"""IF nodes one inside the other, at most (top-p's fallback node sits in its round-2 node:
2)."""


class _CondParams(ctypes.Structure):  # CUDA_CONDITIONAL_NODE_PARAMS
    _fields_ = [
        ("handle", ctypes.c_uint64),
        ("type", ctypes.c_int),
        ("size", ctypes.c_uint),
        ("phGraph_out", ctypes.POINTER(ctypes.c_void_p)),
        ("ctx", ctypes.c_void_p),
    ]


class _NodeParams(ctypes.Structure):  # CUgraphNodeParams: 16 bytes, a 232-byte union, 8
    _fields_ = [
        ("type", ctypes.c_int),
        ("reserved0", ctypes.c_int * 3),
        ("conditional", _CondParams),
        ("rest", ctypes.c_byte * (240 - ctypes.sizeof(_CondParams))),
    ]


class _Driver:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def has(self, name: str) -> bool:
        return hasattr(self.lib, name)

    def __call__(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"logits_gather: {name} failed with CUresult {rc}")


class Conditional:
    """IF nodes for one device: the set kernel, and the pool of the child graphs."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.drv = _Driver()
        with torch.cuda.device(device):
            self.kernel = torch.cuda._compile_kernel(_SOURCE, "logits_gather_set_if")
        self.pool = torch.cuda.MemPool()
        self._depth = 0  # IF nodes being captured, one inside the other
        self._sides = []  # a side stream per nesting level, never a capturing one
        with torch.cuda.device(device):
            for _ in range(DEPTH):
                handle = ctypes.c_void_p()
                self.drv("cuStreamCreate", ctypes.byref(handle), ctypes.c_uint(_NON_BLOCKING))
                self._sides.append(torch.cuda.ExternalStream(handle.value, device=device))

    @staticmethod
    def problem(device: torch.device) -> str | None:
        """Why IF nodes cannot be built here (None if they can), without building one."""
        if device.type != "cuda":
            return f"device is {device}"
        if not hasattr(torch.cuda, "_compile_kernel") or not hasattr(torch.cuda, "MemPool"):
            return f"torch {torch.__version__} lacks torch.cuda._compile_kernel or MemPool"
        try:
            drv = _Driver()
        except OSError as exc:
            return f"no CUDA driver library ({exc})"
        for name in ("cuGraphConditionalHandleCreate", "cuStreamBeginCaptureToGraph"):
            if not drv.has(name):
                return f"the CUDA driver has no {name} (conditional nodes need CUDA >= 12.4)"
        return None

    def _capture_info(self, stream: int) -> tuple[ctypes.c_void_p, ctypes.POINTER, int]:
        status, ident = ctypes.c_int(), ctypes.c_uint64()
        graph, deps = ctypes.c_void_p(), ctypes.POINTER(ctypes.c_void_p)()
        n = ctypes.c_size_t()
        if self.drv.has("cuStreamGetCaptureInfo_v3"):
            edges = ctypes.c_void_p()
            self.drv("cuStreamGetCaptureInfo_v3", ctypes.c_void_p(stream), ctypes.byref(status),
                     ctypes.byref(ident), ctypes.byref(graph), ctypes.byref(deps),
                     ctypes.byref(edges), ctypes.byref(n))  # fmt: skip
        else:
            self.drv("cuStreamGetCaptureInfo_v2", ctypes.c_void_p(stream), ctypes.byref(status),
                     ctypes.byref(ident), ctypes.byref(graph), ctypes.byref(deps),
                     ctypes.byref(n))  # fmt: skip
        if status.value != _ACTIVE:
            raise RuntimeError("logits_gather: an IF node needs a stream capture in progress")
        return graph, deps, n.value

    def capture_if(self, flag: torch.Tensor, body: Callable[[], None]) -> None:
        """Captures ``body`` so that each replay runs it iff ``flag`` (bool ``[1]``) is True.
        ``body`` may call this again: IF nodes nest."""
        parent = torch.cuda.current_stream(self.device)
        stream = parent.cuda_stream
        graph, _, _ = self._capture_info(stream)
        ctx, handle = ctypes.c_void_p(), ctypes.c_uint64()
        self.drv("cuCtxGetCurrent", ctypes.byref(ctx))
        self.drv("cuGraphConditionalHandleCreate", ctypes.byref(handle), graph, ctx,
                 ctypes.c_uint(0), ctypes.c_uint(_ASSIGN_DEFAULT))  # fmt: skip
        halves = [(handle.value >> shift) & 0xFFFFFFFF for shift in (0, 32)]
        args = [h - (1 << 32) if h >= 1 << 31 else h for h in halves]  # as C ints
        self.kernel(grid=(1, 1, 1), block=(1, 1, 1), args=[*args, flag])
        graph, deps, n = self._capture_info(stream)
        params = _NodeParams()
        params.type = _NODE_CONDITIONAL
        params.conditional.handle = handle.value
        params.conditional.type = _COND_IF
        params.conditional.size = 1
        params.conditional.ctx = ctx
        node = ctypes.c_void_p()
        if self.drv.has("cuGraphAddNode_v2"):
            self.drv("cuGraphAddNode_v2", ctypes.byref(node), graph, deps, None,
                     ctypes.c_size_t(n), ctypes.byref(params))  # fmt: skip
        else:
            self.drv("cuGraphAddNode", ctypes.byref(node), graph, deps, ctypes.c_size_t(n),
                     ctypes.byref(params))  # fmt: skip
        child = ctypes.c_void_p(params.conditional.phGraph_out[0])
        one = (ctypes.c_void_p * 1)(node)
        if self.drv.has("cuStreamUpdateCaptureDependencies_v2"):
            self.drv("cuStreamUpdateCaptureDependencies_v2", ctypes.c_void_p(stream), one, None,
                     ctypes.c_size_t(1), ctypes.c_uint(_SET_DEPENDENCIES))  # fmt: skip
        else:
            self.drv("cuStreamUpdateCaptureDependencies", ctypes.c_void_p(stream), one,
                     ctypes.c_size_t(1), ctypes.c_uint(_SET_DEPENDENCIES))  # fmt: skip
        if self._depth >= DEPTH:
            raise RuntimeError(f"logits_gather: IF nodes nest at most {DEPTH} deep")
        side = self._sides[self._depth]
        self.drv("cuStreamBeginCaptureToGraph", ctypes.c_void_p(side.cuda_stream), child, None,
                 None, ctypes.c_size_t(0), ctypes.c_int(_THREAD_LOCAL))  # fmt: skip
        try:
            with torch.cuda.stream(side):
                if self._depth:  # nested: this thread already allocates from the pool
                    self._body(body)
                else:
                    with torch.cuda.use_mem_pool(self.pool, self.device):
                        self._body(body)
        finally:
            out = ctypes.c_void_p()
            self.drv("cuStreamEndCapture", ctypes.c_void_p(side.cuda_stream), ctypes.byref(out))

    def _body(self, body: Callable[[], None]) -> None:
        self._depth += 1
        try:
            body()
        finally:
            self._depth -= 1


__all__ = ["Conditional"]
