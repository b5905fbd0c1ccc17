"""Launch plans of the fused kernels (how a row is cut into splits, how many warps each
kernel runs: pure Python, the CPU tests hold its rules), and the launcher that launches
them without Triton's per-call dispatch."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

NUCLEUS_LANES = 4096
"""Top-p candidates over all splits of a row, at most."""
WIDE = (4096, 8)
"""(columns per split, warps) of greedy, plain logprobs and top-k. Greedy's other splits
were no faster (one H100, world size 1, V=151552, bf16, graph replay, µs at M = 1 / 16 /
64 / 256): 4096 x 8 took 3.5 / 5.1 / 11.1 / 37.8; 2048 x 4 4.6 / 6.0 / 11.3 / 37.4;
8192 x 8 4.2 / 6.3 / 13.2 / 55.3; 16384 x 8 5.2 / 8.2 / 16.7 / 74.3. At M=256 greedy
streams about 2 TB/s whatever the split.

Greedy's writer at M = 1 / 16 / 64 / 256 (one H100, world size 1, bf16, graph replay, µs
of the writer alone, one run; ``torch.amax(x, 1)`` took 7.5 / 9.6 / 14.8 / 41.8): as
built, 2.1 / 3.7 / 9.2 / 35.8; its epoch loaded before the split (kept; timed with masked
loads) 2.1 / 3.9 / 9.1 / 33.8; 4 warps 2.5 / 3.8 / 9.3 / 42.5; 16 warps 2.2 / 4.3 / 11.3 /
43.4; two splits per program, both loads issued first, 2.7 / 4.5 / 10.0 / 36.0; four, 4.3
/ 5.9 / 11.4 / 38.6; ``evict_first`` loads 2.2 / 3.7 / 9.0 / 34.0. So at M=256 the writer
reads 77.6 MB at 2.2 to 2.3 TB/s, faster than torch's own row max. Those writers took
key16 (``keys.best_key16``); bfloat16 rows that :func:`pairs` accepts now take
``keys.best_key_pairs``, 27.1 us at M=256 on the same GPU (its docstring)."""
NARROW = (2048, 4)
"""(columns per split, warps) of sampling, min-p, top-p and logprobs with top_n."""
FINAL_WARPS = 8
"""Warps of top-p's final kernels; no fused kernel runs more (``tests/sampling/test_sampling.py``).
At 16, nucleus_final's machine code was wrong: float16 and float32 rows with no valid
candidate took the decided branch or a round-2 level where 8 and 4 warps said
"undecided"; the same PTX was right through ``ptxas --opt-level 0`` and wrong at levels
1-3 (a ptxas fault or undefined behaviour in the PTX, not found). 16 warps were also no
faster (15.4 against 14.9 us at M=64, one H200)."""


REST = (8192, 16, 512, 8)
"""Top-p's in-kernel fallback (:mod:`..kernels.rest`): (columns per team member at least,
members per rank at most, columns per scan step, warps)."""
REST_PROGRAMS = 128
"""Programs of that fallback's grid per rank, at most (row slots x members): its teams
spin on each other, so the grid must stay resident beside the other ranks' kernels."""


def pdl_capable(device: torch.device) -> bool:
    """Whether ``device`` runs programmatic dependent launches (:class:`Launcher`'s ``pdl``:
    CUDA, sm_90 or later). The caller also needs one rank per GPU."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def xbits(dtype: torch.dtype) -> int:
    """Bits of x's radix keys in the kernels (:func:`..kernels.keys.radix_bits`): 16 for
    bfloat16 inputs (their values fill fp32's top 16), else 32."""
    return 16 if dtype == torch.bfloat16 else 32


def dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` with unit column stride, as every writer reads it (copied only if needed).
    The sampler takes it once per call, so a column-strided shard is copied once, not
    once per round; each round takes it again (no copy then) for callers of
    :class:`.rounds.Fused` itself. Callers that branch on :func:`pairs` take this first,
    so that it judges the tensor the writers will read."""
    return x if x.stride(1) == 1 else x.contiguous()


def pairs(x: torch.Tensor) -> bool:
    """Whether greedy's writers read ``x`` (columns contiguous) as bfloat16 pairs
    (:func:`..kernels.keys.best_key_pairs`): bfloat16 rows that all start 4-byte aligned."""
    return x.dtype == torch.bfloat16 and x.data_ptr() % 4 == 0 and x.stride(0) % 2 == 0


def pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def room(k: int) -> int:
    """Candidate slots for ``k`` (power of two, >= 2)."""
    return max(2, pow2(k))


IDLE_PROGRAMS = 256
"""Programs of a launch that rarely has work (:func:`idle_programs`): on one H200,
top-k's overflow writer took 4.9 us at M=64 on one program per split (1216) and 1.1 us
at M=1 (19); top-p's round-2 writer 4.0 and 0.9."""
IDLE_LEAST = 8
"""Programs per row of such a launch, at least. With one at M=256, a run where 3 rows
reached top-p's round 2 (each then serving its 37 splits in series) took 242.5 us for
top_p=0.9; with 8, a run where 2 did took 196.6, one where none did 170.3 (one H200).
These serve top-p's round 2, skipped when no row needs it; top-k's overflow writer runs
on every call and uses the next two."""
OVERFLOW_PROGRAMS = 128
""":data:`IDLE_PROGRAMS` of top-k's overflow writer: one wave of 8-warp programs at M=64
(its 229 registers fit one per SM). With (256, 8), 64 rows of top_k=50 took 43.8 us, with
(128, 2) 41.5; at M=256 115.7 and 108.3 (one H200)."""
OVERFLOW_LEAST = 2
""":data:`IDLE_LEAST` of top-k's overflow writer: a row all of whose 19 splits overflow
(ties) is served in 10 turns."""


def idle_programs(m: int, splits: int, total: int | None = None, least: int | None = None) -> int:
    """Programs per row of a writer that usually has nothing to do, each serving its share
    of the row's ``splits`` in turn: about ``total`` in all, at least ``least`` per row
    (all ``splits`` if fewer)."""
    total = IDLE_PROGRAMS if total is None else total
    least = IDLE_LEAST if least is None else least
    return min(splits, max(least, total // max(m, 1)))


def select_warps(elements: int, most: int) -> int:
    """Warps for a kernel whose radix select runs over ``elements``: at most one thread per
    element. With the top-k final kernel replicated across threads, emulated tp 4 and 8
    returned wrong top_k = 1 and 2 tokens on one rank (14 in 3868 calls at tp=4), likely
    the warp-local poll exit (:mod:`..kernels.ll`, "Uniform polls") that the waits now
    avoid; the rule stays until a GPU run of that test without it shows it suffices."""
    return max(1, min(most, elements // 32))


def one_warps(writer: int, elements: int, least: int = 1) -> int:
    """Warps of a one-launch kernel whose writer runs ``writer`` warps (at least ``least``)
    and whose row work selects over ``elements`` (:func:`select_warps`); 0: none suits."""
    warps = min(writer, max(1, elements // 32))
    return warps if warps >= least else 0


class Geometry(NamedTuple):
    """How one operation cuts a row: ``splits`` of ``block`` columns per rank, local
    kernels of ``warps`` warps, ``c`` splits over all ranks, ``cand`` = the waiting
    kernels' block over them (a power of two >= c)."""

    block: int
    splits: int
    warps: int
    c: int
    cand: int

    @classmethod
    def of(cls, columns: int, world: int, block: int, warps: int) -> Geometry:
        block = max(min(block, pow2(columns)), 64)
        warps = select_warps(block, warps if block >= 2048 else min(warps, 4))
        splits = -(-columns // block)
        return cls(block, splits, warps, world * splits, max(2, pow2(world * splits)))

    def topk(self, k: int) -> TopK:
        """The fused top-k's launches for ``k`` (1..64) in this geometry."""
        g = min(64, max(8, pow2(-(-k // self.c))))  # <= 64 <= block, and g * c >= k
        kp = room(k)
        least = -(-2 * (1 + g) // 32)  # the probe's lanes: one per half-word
        probe = 8 if least > self.warps else self.warps
        reduce, final = select_warps(self.cand * g, 4), select_warps(self.cand * kp, 8)
        probe_one = one_warps(probe, self.cand * g, least)
        return TopK(g, kp, probe, reduce, final, probe_one, one_warps(self.warps, self.cand * kp))


class TopK(NamedTuple):
    """Round 1: ``g`` group maxima per split (``probe`` warps), reduced by ``reduce`` warps;
    round 2: ``kp`` candidate slots per split, a final kernel of ``final`` warps.
    ``probe_one``, ``final_one``: each round's warps as one launch (0: two launches)."""

    g: int
    kp: int
    probe: int
    reduce: int
    final: int
    probe_one: int
    final_one: int


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
    :func:`..kernels.ll.enter`), so a kernel's launch overlaps the end of the one before
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
        self, fn: Any, grid: tuple[int, int], args: tuple, consts: dict[str, int], warps: int
    ) -> None:
        consts = {**consts, "PDL": self.pdl}  # the C launcher takes every parameter
        index = self._index
        if index is not None and _get_device() != index:
            with torch.cuda.device(index):
                self._launch(fn, grid, args, consts, warps)
        else:
            self._launch(fn, grid, args, consts, warps)

    @staticmethod
    def _key(fn: Any, grid1: int, args: tuple, values: tuple, warps: int) -> tuple[tuple, list]:
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
        self, fn: Any, grid1: int, args: tuple, consts: dict[str, int], warps: int, free: int
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
        self, fn: Any, grid: tuple[int, int], args: tuple, consts: dict[str, int], warps: int
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
        self, fn: Any, grid: tuple[int, int], args: tuple, consts: dict[str, int], warps: int
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

    def _entry(self, ck: Any) -> tuple:
        """``(launch, arguments before the kernel's)`` for a compiled kernel: its C
        launcher when it needs no scratch memory (as ``CudaLauncher.__call__`` calls it),
        else ``CompiledKernel.run``."""
        if self._stream is None:
            from triton.runtime import driver

            self._stream = driver.active.get_current_stream
        run = ck.run
        hooks = (ck.packed_metadata, None, None, None)  # launch metadata and hooks: none
        direct = getattr(run, "launch", None)
        scratch = getattr(run, "global_scratch_size", 1), getattr(run, "profile_scratch_size", 1)
        if direct is None or any(scratch) or not hasattr(run, "launch_pdl"):
            return run, (ck.function, *hooks)
        coop, pdl = run.launch_cooperative_grid, run.launch_pdl
        return direct, (ck.function, coop, pdl, None, None, *hooks)
