"""The fused kernels' launcher: it launches a Triton kernel without Triton's per-call
dispatch, through the compiled kernel's C launcher (:func:`logits_gather.launch.c_launcher`,
the package's one bypass of Triton's launcher)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from triton.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

log = logging.getLogger(__name__)
_get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


class Bound:
    """A compiled kernel with every argument but the first few fixed (:meth:`Launcher.bind`):
    one call of Triton's C launcher, no per-argument Python."""

    __slots__ = ("_grid1", "_head", "_launch", "_tail")

    def __init__(self, launch: Callable[..., Any], grid1: int, head: tuple, tail: tuple) -> None:
        self._launch, self._grid1, self._head, self._tail = launch, grid1, head, tail

    def __call__(self, grid0: int, stream: int, free: tuple) -> None:
        self._launch(grid0, self._grid1, 1, stream, *self._head, *free, *self._tail)


class Launcher:
    """Launches a Triton kernel, skipping the JIT dispatch (10-20 us of host time) after
    the first call of each specialisation: the compiled kernel is cached under Triton's
    specialisation key and launched through its C launcher (``CompiledKernel.run`` when it
    needs scratch memory), tensors as addresses. Any failure of that route falls back to
    the JIT for good (logged once). Launches go to the sampler's device and its current
    stream, whatever the caller's current device.

    ``barrier`` (ranks that share a GPU, :func:`.policy.sharing_barrier`): run once per
    kernel variant after this rank compiled and loaded it, before its first launch. The
    variant is named by what every rank shares (kernel, ``grid[1]``, warps, constexprs), so
    every rank makes the same barrier calls.

    ``pdl``: every launch is a programmatic dependent launch (``PDL`` in each kernel,
    :func:`..kernels.exchange.enter`), so a kernel's launch overlaps the end of the one before
    it. Only with one rank per GPU: a launched kernel's programs hold their slots while
    they wait, and a peer's writer on the same GPU may need them."""

    def __init__(
        self,
        index: int | None = None,
        barrier: Callable[[], None] | None = None,
        pdl: bool = False,
    ) -> None:
        self._cache: dict[tuple, tuple] = {}  # kernels stay alive: they are module globals
        self._jit_only = False
        self._index = index
        self._stream: Any = None
        self._barrier = barrier
        self._loaded: set[tuple] = set()  # variants past the barrier
        self.pdl = pdl

    def __call__(
        self,
        fn: JITFunction,
        grid: tuple[int, int],
        args: tuple,
        consts: dict[str, int],
        warps: int,
    ) -> None:
        consts = {**consts, "PDL": self.pdl}  # the C launcher takes every parameter
        index = self._index
        if index is not None and _get_device() != index:
            with torch.cuda.device(index):
                self._launch(fn, grid, args, consts, warps)
        else:
            self._launch(fn, grid, args, consts, warps)

    @staticmethod
    def _key(
        fn: JITFunction, grid1: int, args: tuple, values: tuple, warps: int
    ) -> tuple[tuple, list]:
        """``(key, flat)``: the specialisation key of a launch, and its arguments with
        tensors as their addresses (Triton's C launcher then neither calls ``data_ptr``
        nor asks the driver about them). The key holds what Triton specialises on: for
        an int ``== 1``, ``% 16 == 0`` and its width; for a tensor its dtype and 16-byte
        alignment; for anything else its type."""
        key = [id(fn), grid1, warps, values]  # id: a JITFunction's own hash runs Python
        flat = []
        for a in args:  # ints and tensors inlined: this runs for every argument of every launch
            if a.__class__ is int:
                key += (a == 1, not a & 15, a.bit_length() > 31)
                flat.append(a)
            elif isinstance(a, torch.Tensor):
                p = a.data_ptr()
                key.append((a.dtype, not p & 15))
                flat.append(p)
            else:
                key.append(type(a))
                flat.append(a)
        return tuple(key), flat

    def bind(
        self,
        fn: JITFunction,
        grid1: int,
        args: tuple,
        consts: dict[str, int],
        warps: int,
        free: int,
    ) -> Bound | None:
        """The compiled kernel that a launch of ``fn`` with these arguments used (so
        launch it through :meth:`__call__` first), bound to every argument after the
        first ``free`` ones (tensors as their addresses); None when there is none
        (Triton's JIT route only). The caller keys what it binds on whatever Triton
        specialises in the free arguments (see :meth:`_key`)."""
        if self._jit_only:
            return None
        consts = {**consts, "PDL": self.pdl}  # the C launcher takes every parameter
        values = tuple(consts.values())
        key, flat = self._key(fn, grid1, args, values, warps)
        entry = self._cache.get(key)
        if entry is None:
            return None
        launch, head = entry
        return Bound(launch, grid1, head, (*flat[free:], *values))

    def fast(self, bound: Bound, grid0: int, free: tuple) -> bool:
        """Launches ``bound`` on ``grid0`` rows with its ``free`` arguments (addresses and
        ints: Triton's launcher neither calls ``data_ptr`` nor asks the driver about an
        int), on this launcher's device and that device's current stream. If that fails,
        logs it once, uses Triton's JIT route from then on and returns False (the caller
        then launches the same work through :meth:`__call__`)."""
        index = self._index
        try:
            if index is None:
                bound(grid0, self._stream(_get_device()), free)
            elif _get_device() != index:
                with torch.cuda.device(index):
                    bound(grid0, self._stream(index), free)
            else:
                bound(grid0, self._stream(index), free)
        except Exception:  # noqa: BLE001 - the JIT route still works
            log.warning(
                "logits_gather.sampling: bound Triton launch failed; using Triton's JIT "
                "dispatch from now on",
                exc_info=True,
            )
            self._jit_only = True
            return False
        return True

    def _launch(
        self,
        fn: JITFunction,
        grid: tuple[int, int],
        args: tuple,
        consts: dict[str, int],
        warps: int,
    ) -> None:
        values = tuple(consts.values())
        key, flat = self._key(fn, grid[1], args, values, warps)
        entry = None if self._jit_only else self._cache.get(key)
        if entry is not None:
            launch, head = entry
            try:
                launch(grid[0], grid[1], 1, self._stream(_get_device()), *head, *flat, *values)
                return
            except Exception:  # noqa: BLE001 - the JIT route below still works
                log.warning(
                    "logits_gather.sampling: cached Triton launch failed; using "
                    "Triton's JIT dispatch from now on",
                    exc_info=True,
                )
                self._jit_only = True
        unknown = sorted(set(consts) - set(fn.arg_names))
        if unknown:  # the interpreter would ignore them
            raise TypeError(f"{fn.__name__} has no parameters {unknown}")
        if self._barrier is not None:
            self._load(fn, grid, args, consts, warps)
        options = {"launch_pdl": True} if self.pdl else {}
        ck = fn[grid](*args, **consts, num_warps=warps, **options)
        if not self._jit_only and ck is not None and hasattr(ck, "run"):
            self._cache[key] = self._entry(ck)

    def _load(
        self,
        fn: JITFunction,
        grid: tuple[int, int],
        args: tuple,
        consts: dict[str, int],
        warps: int,
    ) -> None:
        """Compiles and loads a new variant without launching it, then runs the barrier."""
        variant = (id(fn), grid[1], warps, tuple(consts.items()))
        if variant in self._loaded:
            return
        self._loaded.add(variant)
        try:
            ck = fn.warmup(*args, grid=grid, **consts, num_warps=warps)
            init = getattr(ck, "_init_handles", None)
            if init is not None:
                init()
        except Exception:  # noqa: BLE001 - the launch below raises it; peers need the barrier
            log.warning("logits_gather.sampling: compiling %s ahead failed", fn, exc_info=True)
        self._barrier()  # on every rank, whatever happened above

    def _entry(self, ck: CompiledKernel) -> tuple:
        """``(launch, arguments before the kernel's)`` for a compiled kernel: its C
        launcher when it needs no scratch memory (as ``CudaLauncher.__call__`` calls it),
        else ``CompiledKernel.run``."""
        from ...launch import c_launcher  # imports Triton, as this module must not

        if self._stream is None:
            from triton.runtime import driver

            self._stream = driver.active.get_current_stream
        run = ck.run
        hooks = (ck.packed_metadata, None, None, None)  # launch metadata and hooks: none
        direct = getattr(run, "launch", None)
        scratch = getattr(run, "global_scratch_size", 1), getattr(run, "profile_scratch_size", 1)
        if direct is None or any(scratch) or not hasattr(run, "launch_pdl"):
            return run, (ck.function, *hooks)
        return c_launcher(ck)


def pdl_capable(device: torch.device) -> bool:
    """Whether ``device`` runs programmatic dependent launches (:class:`Launcher`'s ``pdl``:
    CUDA, sm_90 or later). The caller also needs one rank per GPU."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)
