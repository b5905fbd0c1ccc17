"""Launching the fused kernels without Triton's per-call JIT dispatch."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

log = logging.getLogger(__name__)

JIT_ENV = "LOGITS_GATHER_SAMPLING_JIT"
"""Set to 1 to launch through Triton's JIT dispatch every time (no cached kernels)."""


def _spec(a: Any) -> Any:
    """What Triton specialises an argument on: dtype and 16-byte alignment for tensors,
    ``== 1``, ``% 16 == 0`` and width for ints."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    return a == 1, a % 16 == 0, a.bit_length() > 31


class Launcher:
    """Launches a Triton kernel, skipping the JIT dispatch (10-20 us of host time) after
    the first call of each specialisation: the compiled kernel is cached under the same
    specialisation key Triton uses, then called through its launcher. Any failure of
    the cached route falls back to the JIT for good (logged once). Launches go to the
    sampler's device and its current stream, whatever the caller's current device."""

    def __init__(self, index: int | None = None) -> None:
        self._cache: dict[tuple, Any] = {}
        self._jit_only = os.environ.get(JIT_ENV) == "1"
        self._index = index

    def __call__(
        self, fn: Any, grid: tuple[int, int], args: tuple, consts: dict[str, int], warps: int
    ) -> None:
        if self._index is not None and torch.cuda.current_device() != self._index:
            with torch.cuda.device(self._index):
                self._launch(fn, grid, args, consts, warps)
        else:
            self._launch(fn, grid, args, consts, warps)

    def _launch(
        self, fn: Any, grid: tuple[int, int], args: tuple, consts: dict[str, int], warps: int
    ) -> None:
        key = (fn, grid[1], warps, tuple(consts.values()), *map(_spec, args))
        ck = None if self._jit_only else self._cache.get(key)
        if ck is not None:
            try:
                from triton.runtime import driver

                stream = driver.active.get_current_stream(torch.cuda.current_device())
                ck.run(
                    grid[0],
                    grid[1],
                    1,
                    stream,
                    ck.function,
                    ck.packed_metadata,
                    None,
                    None,
                    None,
                    *args,
                    *consts.values(),
                )
                return
            except Exception:  # noqa: BLE001 - the JIT route below still works
                log.warning(
                    "logits_gather.sampling: cached Triton launch failed; using "
                    "Triton's JIT dispatch from now on",
                    exc_info=True,
                )
                self._jit_only = True
        ck = fn[grid](*args, **consts, num_warps=warps)
        if not self._jit_only and ck is not None and hasattr(ck, "run"):
            self._cache[key] = ck


__all__ = ["JIT_ENV", "Launcher"]
