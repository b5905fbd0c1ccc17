"""Compiling the push kernel once per variant, and launching Triton kernels with little host work.

Triton's JIT dispatch costs 10-20 us of host time per call (binding, key
hashing, specialisation checks). Here a kernel is compiled once per variant
with ``JITFunction.warmup``, and :class:`TritonLaunch` calls Triton's compiled C
launcher directly, with every argument but the input address and ``m`` frozen.

A ctypes ``cuLaunchKernel`` route with prebuilt parameter arrays was measured
on the H200 (2 ranks sharing the GPU under MPS, host cost per full eager call)
and dropped: 7.8 and 10.7 us on the two ranks against 7.1 and 10.3 us for
Triton's launcher (a torch ``add_``: 7.6 and 10.6 us).

The kernel's parameters are its non-constexpr arguments in order, followed by
two scratch pointers Triton appends (both unused here: their size is checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import kernel as K


class Ptr:
    """Stands in for a tensor while compiling: Triton specialises pointer
    arguments on ``data_ptr() % 16``, and that is all it reads."""

    def __init__(self, addr: int, dtype: torch.dtype) -> None:
        self._addr, self.dtype = addr, dtype

    def data_ptr(self) -> int:
        return self._addr


def compile_kernel(
    sample_args: Sequence[int],
    dtype: torch.dtype,
    *,
    aligned: bool,
    device: torch.device,
    timeout_us: int,
    num_warps: int,
    constants: dict[str, int],
):
    """Compiles one variant; ``sample_args`` are the frozen pointer arguments."""
    *dsts, flags, peer_flags, status = sample_args
    ptrs = [Ptr(a, dtype) for a in dsts]
    ptrs += [Ptr(flags, torch.int32), Ptr(peer_flags, torch.int64), Ptr(status, torch.int32)]
    src = Ptr(16 if aligned else 2, dtype)
    with torch.cuda.device(device):
        ck = K.push_gather_kernel.warmup(
            src, *ptrs, 1, timeout_us, grid=(1,), num_warps=num_warps, **constants
        )
        ck._init_handles()
    if ck.run.global_scratch_size or ck.run.profile_scratch_size:
        raise RuntimeError("push_gather_kernel unexpectedly needs scratch memory")
    return ck


def c_launcher(ck) -> tuple[Any, tuple]:
    """Triton's C launcher of the compiled kernel ``ck`` and the arguments that come before
    the kernel's own (as ``CudaLauncher.__call__`` passes them: no launch metadata, no
    hooks); call it as ``launch(grid0, grid1, grid2, stream, *head, *args)``. The one
    route around Triton's launcher: the push kernel, the fused head and the fused
    sampling kernels take it."""
    run = ck.run
    hooks = (ck.packed_metadata, None, None, None)
    return run.launch, (ck.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                        *hooks)  # fmt: skip


def raw_launch(ck) -> tuple[Any, tuple, int]:
    """:func:`c_launcher` of ``ck``, and the number of constexpr parameters (passed as
    trailing ``None``)."""
    launch, head = c_launcher(ck)
    n_const = sum(1 for v in ck.src.signature.values() if v == "constexpr")
    return launch, head, n_const


class TritonLaunch:
    def __init__(self, ck, tails: Sequence[Sequence[int]], timeout_us: int) -> None:
        self._launch, self._head, n_const = raw_launch(ck)
        self._tails = [tuple(t) for t in tails]
        self._end = (timeout_us,) + (None,) * n_const

    def __call__(self, grid: int, stream: int, src: int, slot: int, m: int) -> None:
        self._launch(grid, 1, 1, stream, *self._head, src, *self._tails[slot], m, *self._end)
