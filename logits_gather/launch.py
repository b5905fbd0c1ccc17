"""Compiling the push kernel once, and launching it with little host work.

Triton's JIT dispatch costs 10-20 us of host time per call (binding, key
hashing, specialisation checks). Here a kernel is compiled once per variant
with ``JITFunction.warmup`` and then launched through one of two routes, both
with every argument but the input address and ``m`` frozen:

* :class:`TritonLaunch` (default): Triton's own compiled C launcher, called
  directly with the frozen arguments.
* :class:`DriverLaunch` (``LOGITS_GATHER_LAUNCHER=driver``): ``cuLaunchKernel``
  from libcuda through ctypes, with a prebuilt ``void *params[]`` per slot.

Measured on the H200 (2 ranks sharing the GPU under MPS, host cost per full
eager call): the Triton route 7.1 and 10.3 us on the two ranks, the ctypes route
7.8 and 10.7 us, a torch ``add_`` 7.6 and 10.6 us. ctypes' own call machinery
costs more than Triton's argument parsing, so Triton's launcher is the default.

The kernel's parameters are its non-constexpr arguments in order, followed by
two scratch pointers Triton appends (both unused here: their size is checked).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

import torch

from . import kernel as K

NUM_WARPS = 4
LAUNCHER_ENV = "LOGITS_GATHER_LAUNCHER"


class _Ptr:
    """Stands in for a tensor while compiling: Triton specialises pointer
    arguments on ``data_ptr() % 16``, and that is all it reads."""

    def __init__(self, addr: int, dtype: torch.dtype) -> None:
        self._addr, self.dtype = addr, dtype

    def data_ptr(self) -> int:
        return self._addr


def compile_kernel(sample_args: Sequence[int], dtype: torch.dtype, *, aligned: bool,
                   device: torch.device, timeout_us: int, constants: dict[str, int]):
    """Compiles one variant; ``sample_args`` are the frozen pointer arguments."""
    *dsts, flags, peer_flags, status = sample_args
    ptrs = [_Ptr(a, dtype) for a in dsts]
    ptrs += [_Ptr(flags, torch.int32), _Ptr(peer_flags, torch.int64), _Ptr(status, torch.int32)]
    src = _Ptr(16 if aligned else 2, dtype)
    with torch.cuda.device(device):
        ck = K.push_gather_kernel.warmup(src, *ptrs, 1, timeout_us, grid=(1,),
                                         num_warps=NUM_WARPS, **constants)
        ck._init_handles()
    if ck.run.global_scratch_size or ck.run.profile_scratch_size:
        raise RuntimeError("push_gather_kernel unexpectedly needs scratch memory")
    return ck


class TritonLaunch:
    def __init__(self, ck, tails: Sequence[Sequence[int]], timeout_us: int) -> None:
        run = ck.run
        self._launch = run.launch
        self._head = (ck.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                      ck.packed_metadata, None, None, None)
        self._tails = [tuple(t) for t in tails]
        n_const = sum(1 for v in ck.src.signature.values() if v == "constexpr")
        self._end = (timeout_us,) + (None,) * n_const

    def __call__(self, grid: int, stream: int, src: int, slot: int, m: int) -> None:
        self._launch(grid, 1, 1, stream, *self._head, src, *self._tails[slot], m, *self._end)


class DriverLaunch:
    """``cuLaunchKernel`` through ctypes. No ``argtypes``: every argument is
    already a ctypes pointer object or a small int, which skips ctypes'
    per-argument conversion on the hot path."""

    _lib = None

    def __init__(self, ck, tails: Sequence[Sequence[int]], timeout_us: int) -> None:
        if DriverLaunch._lib is None:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
            fn.restype = ctypes.c_int
            DriverLaunch._lib = fn
        self._cu_launch = DriverLaunch._lib
        self._function = ctypes.c_void_p(ck.function)
        self._threads = ck.metadata.num_warps * 32
        self._shared = ck.metadata.shared
        self._src = ctypes.c_uint64(0)
        self._m = ctypes.c_int32(0)
        self._stream = (None, ctypes.c_void_p(0))
        fixed = ctypes.c_int32(timeout_us), ctypes.c_uint64(0), ctypes.c_uint64(0)
        self._keep = [fixed]
        self._params = []
        for tail in tails:
            words = [ctypes.c_uint64(p) for p in tail]
            self._keep.append(words)
            slots = [self._src, *words, self._m, *fixed]
            self._params.append((ctypes.c_void_p * len(slots))(*map(ctypes.addressof, slots)))

    def __call__(self, grid: int, stream: int, src: int, slot: int, m: int) -> None:
        if stream != self._stream[0]:
            self._stream = (stream, ctypes.c_void_p(stream))
        self._src.value = src
        self._m.value = m
        rc = self._cu_launch(self._function, grid, 1, 1, self._threads, 1, 1, self._shared,
                             self._stream[1], self._params[slot], None)
        if rc:
            raise RuntimeError(f"cuLaunchKernel failed with CUresult {rc}")


def make_launch(ck, tails: Sequence[Sequence[int]], timeout_us: int):
    """Triton's launcher, or the ctypes route when ``LOGITS_GATHER_LAUNCHER=driver``."""
    route = os.environ.get(LAUNCHER_ENV, "triton")
    if route not in ("triton", "driver"):
        raise ValueError(f"{LAUNCHER_ENV} must be 'triton' or 'driver', got {route!r}")
    return DriverLaunch(ck, tails, timeout_us) if route == "driver" else TritonLaunch(
        ck, tails, timeout_us)
