"""Side measurements: the world-size-1 NCCL host costs and which NCCL kernels the
all-gathers launched; the buffers kept until the run ends. (The limit's probes:
``barrier_probe.py`` and ``push_probe.py``.)"""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.distributed as dist

from ..timing import schedule
from .methods import ALL_GATHER

# Symmetric buffers kept until the process ends: a freed symmetric block is reused
# at an offset by later allocations, which readers that ignore offsets (torch's
# copy-engine all-gather) would then read from the wrong place.
KEPT: list[Any] = []


def keep_alive(obj: Any) -> None:
    KEPT.append(obj)


def release_all() -> None:
    """Frees the kept buffers; call on every rank at once, with no work in flight."""
    KEPT.clear()
    gc.collect()


def failure_text(exc: BaseException) -> str:
    """One line naming ``exc`` (its type and first line, at most 300 characters)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


class WorldSizeOne:
    """Eager host cost at world size 1, where NCCL runs even on a shared GPU: an NCCL
    ``all_gather_into_tensor`` on a 1-rank subgroup, and vLLM's stock path (that
    all-gather plus the permute copy, forced: at world size 1 the reshape is a view)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx, self.reason, self.sub = ctx, None, None
        problem = None
        if not dist.is_nccl_available():
            problem = "this torch has no NCCL"
        reason = ctx.first_reason(problem)
        if not reason:
            try:
                self.sub, _ = dist.new_subgroups(group_size=1, backend="nccl")
            except Exception as exc:  # noqa: BLE001
                problem = failure_text(exc)
            reason = ctx.first_reason(problem)
        self.reason = reason
        self._out: dict[tuple, torch.Tensor] = {}  # several V share one probe

    def nccl_all_gather(self, x: torch.Tensor) -> torch.Tensor:
        out = self._out[(tuple(x.shape), x.dtype)]
        ALL_GATHER(out, x, group=self.sub)
        return out

    def stock(self, x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
        ALL_GATHER(out, x, group=self.sub)
        res = torch.empty((m, n), dtype=x.dtype, device=x.device)
        res.view(m, 1, n).copy_(out.view(1, m, n).movedim(0, 1))
        return res

    def host_costs(self, clock: Any, xs: list[torch.Tensor], calls: int) -> dict[str, float]:
        """This rank's host µs per call for both; warmed up first (the first NCCL call
        creates the communicator)."""
        self._out.setdefault((tuple(xs[0].shape), xs[0].dtype), torch.empty_like(xs[0]))
        costs = {}
        for name, fn in (("nccl_ag_ws1", self.nccl_all_gather), ("stock_ws1", self.stock)):
            clock.wall(fn, schedule(xs, 5))
            costs[name] = clock.host(fn, schedule(xs, calls), 30.0)
        return costs


def nccl_kernels(ctx: Any, methods: dict[str, Any], rows: tuple[int, ...]) -> dict[str, Any]:
    """Which NCCL kernel each NCCL method launched at each M, from a profile of one call
    per M. NCCL names its symmetric kernels ``ncclSymk...``; a silent fallback to the
    regular kernels shows up as ``ncclDevKernel_...``."""
    names = [n for n in ("stock", "nccl_symm") if n in methods]
    if ctx.plan.pg_backend != "nccl" or not names:
        return {"symmetric": "not applicable (no NCCL method ran)"}
    problem, seen = None, []
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        ctx.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for name in names:
                for m in rows:
                    methods[name](methods[name].inputs(m)[0])
                    ctx.sync()
        seen = sorted(
            (e.time_range.start, e.name)
            for e in prof.events()
            if e.device_type == DeviceType.CUDA and "nccl" in e.name.lower()
        )
    except Exception as exc:  # noqa: BLE001
        problem = failure_text(exc)
    ctx.barrier()
    if problem:
        return {"symmetric": f"unknown (profiler failed: {problem})"}
    kernels = [k for _, k in seen]
    out: dict[str, Any] = {}
    if len(kernels) == len(names) * len(rows):
        for i, name in enumerate(names):
            mine = kernels[i * len(rows) : (i + 1) * len(rows)]
            out[name] = dict(zip(map(str, rows), mine, strict=True))
        per_m = out.get("nccl_symm", {})
        symk = [m for m, k in per_m.items() if "symk" in k.lower()]
        if "nccl_symm" not in out:
            out["symmetric"] = "not applicable (nccl_symm did not run)"
        elif len(symk) == len(per_m):
            out["symmetric"] = "yes, at every M"
        elif symk:
            out["symmetric"] = f"partly: at M in {{{', '.join(symk)}}} only"
        else:
            out["symmetric"] = "no: NCCL fell back to its regular kernels"
    else:
        out["all"] = sorted(set(kernels))
        out["symmetric"] = "unknown: could not match kernels to calls; seen " + (
            ", ".join(out["all"]) or "none"
        )
    return out
