"""Side measurements: the peer-bandwidth ceiling, the empty-barrier latency, the
world-size-1 NCCL host costs, and which NCCL kernels the all-gathers launched."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from .data import random_shard
from .methods import ALL_GATHER
from .timing import burst_size, schedule

BARRIER_COLUMNS = 8
# Symmetric buffers kept until the process ends: a freed symmetric block is reused
# at an offset by later allocations, which readers that ignore offsets (torch's
# copy-engine all-gather) would then read from the wrong place.
_KEEP: list[Any] = []


def keep_alive(obj: Any) -> None:
    _KEEP.append(obj)


def release_all() -> None:
    """Frees the kept buffers; call on every rank at once, with no work in flight."""
    _KEEP.clear()
    gc.collect()


def _failed(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def push_bandwidth(ctx: Any, clock: Any) -> dict[str, Any]:
    """Peak peer-store bandwidth: every rank at once copies one large chunk into each
    peer's symmetric buffer (GPU), or a large gloo all-gather (CPU). Egress per rank
    is ``(tp-1) * chunk``; the slowest rank's median time counts."""
    w, reps = ctx.world, max(3, ctx.cfg.bursts)
    total = ctx.cfg.limit_mib * 2**20 if ctx.cuda else min(ctx.cfg.limit_mib, 8) * 2**20
    chunk = total // (w - 1) // 16 * 16
    times, problem, source = [], None, ""
    try:
        if ctx.cuda:
            import torch.distributed._symmetric_memory as symm_mem

            buf = symm_mem.empty(w * chunk, dtype=torch.uint8, device=ctx.device)
            handle = symm_mem.rendezvous(buf, ctx.group)
            src = torch.randint(0, 256, (chunk,), dtype=torch.uint8, device=ctx.device)
            _KEEP.append((buf, handle))
            base = buf.data_ptr() - int(handle.buffer_ptrs[ctx.rank])  # get_buffer ignores it
            views = [handle.get_buffer(p, (chunk,), torch.uint8, base + ctx.rank * chunk)
                     for p in range(w) if p != ctx.rank]
            for _ in range(reps + 1):
                handle.barrier(channel=0)
                clock.start.record()
                for v in views:
                    v.copy_(src)
                clock.end.record()
                clock.end.synchronize()
                times.append(clock.start.elapsed_time(clock.end) * 1e3)
            source = "copy_ of one chunk into every peer's symmetric buffer, all ranks at once"
            ctx.sync()
        else:
            src = torch.randint(0, 256, (chunk,), dtype=torch.uint8)
            out = torch.empty(w * chunk, dtype=torch.uint8)
            for _ in range(reps + 1):
                ctx.barrier()
                t0 = time.perf_counter()
                ALL_GATHER(out, src, group=ctx.group)
                times.append((time.perf_counter() - t0) * 1e6)
            source = "gloo all-gather of one large chunk per rank"
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        problem = _failed(exc)
    reason = ctx.first_reason(problem)
    local = statistics.median(times[1:]) if not problem else None
    worst = max(ctx.gather(local) if not reason else [0.0])
    ctx.barrier()
    if reason:
        return {"status": "unavailable", "reason": reason}
    egress = (w - 1) * chunk
    return {"status": "ok", "gbps": egress / worst / 1e3, "us": worst, "egress_bytes": egress,
            "source": source}


def barrier_latency(ctx: Any, clock: Any) -> dict[str, Any]:
    """The empty barrier: ours at M=1 with a few columns (launch, one tiny push, the
    exit barrier), timed like every other method."""
    from logits_gather import LogitsGather

    problem, local, backend = None, None, None
    try:
        g = LogitsGather(columns=BARRIER_COLUMNS, capacity=1, device=ctx.device,
                         dtype=ctx.cfg.torch_dtype, backend=ctx.cfg.ours_backend, graphs=False)
        backend = g.backend
        keep_alive(g)
        xs = [random_shard(ctx.rank + s, 1, BARRIER_COLUMNS, ctx.cfg.torch_dtype, ctx.device)
              for s in range(2)]
        est = clock.wall(g, schedule(xs, ctx.cfg.warmup))
    except Exception as exc:  # noqa: BLE001
        problem = _failed(exc)
    reason = ctx.first_reason(problem)
    if reason:
        return {"status": "unavailable", "reason": reason}
    try:
        n = burst_size(max(ctx.gather(est)), ctx.cfg.budget_ms, ctx.cfg.iters, 1)
        local = statistics.median(clock.burst(g, schedule(xs, n), 50.0)
                                  for _ in range(max(3, ctx.cfg.bursts)))
        ctx.sync()
    except Exception as exc:  # noqa: BLE001
        problem = _failed(exc)
    reason = ctx.first_reason(problem)
    if reason:
        return {"status": "unavailable", "reason": reason}
    return {"status": "ok", "us": max(ctx.gather(local)),
            "source": f"ours (backend {backend}) at M=1 with {BARRIER_COLUMNS} columns"}


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
                problem = _failed(exc)
            reason = ctx.first_reason(problem)
        self.reason = reason
        self._out: dict[int, torch.Tensor] = {}

    def nccl_all_gather(self, x: torch.Tensor) -> torch.Tensor:
        out = self._out[x.shape[0]]
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
        m = xs[0].shape[0]
        self._out.setdefault(m, torch.empty_like(xs[0]))
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
    if ctx.plan.mode != "nccl" or not names:
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
        seen = sorted((e.time_range.start, e.name) for e in prof.events()
                      if e.device_type == DeviceType.CUDA and "nccl" in e.name.lower())
    except Exception as exc:  # noqa: BLE001
        problem = _failed(exc)
    ctx.barrier()
    if problem:
        return {"symmetric": f"unknown (profiler failed: {problem})"}
    kernels = [k for _, k in seen]
    out: dict[str, Any] = {}
    if len(kernels) == len(names) * len(rows):
        for i, name in enumerate(names):
            mine = kernels[i * len(rows):(i + 1) * len(rows)]
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
        out["symmetric"] = ("unknown: could not match kernels to calls; seen "
                            + (", ".join(out["all"]) or "none"))
    return out
