"""The bandwidth side of the limit: peak peer-store bandwidth, two ways, the better counts.

* ``copy_``: every rank at once ``copy_``s one chunk into each peer's symmetric
  buffer (copy engines or torch's copy kernel, whichever torch picks).
* ``triton stores``: every rank at once runs one Triton kernel on all SMs that loads
  its chunk once and stores it, in 16-byte vectors, into every peer's buffer:
  what a push gather does, without the gather's layout or barrier.

Egress per rank is ``(tp-1) * chunk`` with ``chunk = --limit-mib / (tp-1)``; per
rep the ranks line up on the symmetric handle's barrier, CUDA events time the
transfer; median per rank, then the slowest rank. Triton is imported lazily.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

BLOCK = 2048  # int32 per program per step: 4 x 16 B per thread at 4 warps
_KERNEL: Any = None
tl: Any = None


def kernel() -> Any:
    global _KERNEL, tl  # a module global: the JIT resolves names there
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit(do_not_specialize=["rank"])
        def _store_push(src, dst_ptrs, n, rank, WORLD: tl.constexpr, BLOCK: tl.constexpr):
            pid, nprog = tl.program_id(0), tl.num_programs(0)
            for start in range(pid * BLOCK, n, nprog * BLOCK):
                offs = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK), BLOCK), BLOCK)
                mask = offs < n
                v = tl.load(src + offs, mask=mask)
                for p in tl.static_range(WORLD):
                    if p != rank:
                        dst = tl.load(dst_ptrs + p).to(tl.pointer_type(tl.int32))
                        dst = tl.multiple_of(dst, 16)
                        tl.store(dst + offs, v, mask=mask)

        _KERNEL = _store_push
    return _KERNEL


def _pattern(rank: int, nbytes: int, device: torch.device) -> torch.Tensor:
    """What rank ``rank`` pushes: distinct per rank, so a misplaced store is seen."""
    words = torch.arange(nbytes // 4, dtype=torch.int32, device=device) * 7 + rank * 1_000_003
    return words.view(torch.uint8)


def _time(ctx: Any, clock: Any, handle: Any, fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps + 1):
        handle.barrier(channel=0)
        clock.start.record()
        fn()
        clock.end.record()
        clock.end.synchronize()
        times.append(clock.start.elapsed_time(clock.end) * 1e3)
    return statistics.median(times[1:])


def push_bandwidth(ctx: Any, clock: Any, keep: list[Any]) -> dict[str, Any]:
    """Collective. ``{"status": "ok", "gbps": best, "candidates": {...}}`` or why not."""
    from .side import failure_text

    if not ctx.cuda:
        return {"status": "unavailable", "reason": "needs CUDA (this run is on CPU)"}
    w, reps = ctx.world, max(3, ctx.cfg.bursts)
    chunk = ctx.cfg.limit_mib * 2**20 // (w - 1) // BLOCK // 4 * BLOCK * 4
    local: dict[str, float] = {}
    problems: dict[str, str | None] = {"copy_": None, "triton stores": None}
    handle, setup = None, None
    try:
        import torch.distributed._symmetric_memory as symm_mem

        buf = symm_mem.empty(w * chunk, dtype=torch.uint8, device=ctx.device)
        handle = symm_mem.rendezvous(buf, ctx.group)
        keep.append((buf, handle))
        src = _pattern(ctx.rank, chunk, ctx.device)
        base = buf.data_ptr() - int(handle.buffer_ptrs[ctx.rank])  # get_buffer ignores it
        views = [
            handle.get_buffer(p, (chunk,), torch.uint8, base + ctx.rank * chunk)
            for p in range(w)
            if p != ctx.rank
        ]
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        setup = failure_text(exc)
    reason = ctx.first_reason(setup)
    if reason:
        return {"status": "unavailable", "reason": f"symmetric buffer: {reason}"}

    def copies() -> None:
        for v in views:
            v.copy_(src)

    try:
        local["copy_"] = _time(ctx, clock, handle, copies, reps)
    except Exception as exc:  # noqa: BLE001
        problems["copy_"] = failure_text(exc)
    problem = None
    try:
        ptrs = torch.tensor(
            [int(handle.buffer_ptrs[p]) + base + ctx.rank * chunk for p in range(w)],
            dtype=torch.int64,
            device=ctx.device,
        )
        sms = torch.cuda.get_device_properties(ctx.device).multi_processor_count
        src32, n = src.view(torch.int32), chunk // 4
        grid = (min(2 * sms, -(-n // BLOCK)),)

        def stores() -> None:
            kernel()[grid](src32, ptrs, n, ctx.rank, WORLD=w, BLOCK=BLOCK, num_warps=4)

        stores()  # compiles outside the timing
        ctx.sync()
    except Exception as exc:  # noqa: BLE001
        problem = failure_text(exc)
    ctx.barrier()  # no peer still stores into this buffer
    buf.zero_()
    ctx.sync()
    problems["triton stores"] = ctx.first_reason(problem)
    if not problems["triton stores"]:
        local["triton stores"] = _time(ctx, clock, handle, stores, reps)
        ctx.sync()
        handle.barrier(channel=0)
        mine = buf.view(w, chunk)
        wrong = [
            p
            for p in range(w)
            if p != ctx.rank and not torch.equal(mine[p], _pattern(p, chunk, ctx.device))
        ]
        if wrong:
            problems["triton stores"] = f"data from ranks {wrong} arrived wrong"
            local.pop("triton stores")
    ctx.sync()
    everyone = ctx.gather((local, problems))
    egress = (w - 1) * chunk
    out: dict[str, Any] = {"egress_bytes": egress, "candidates_gbps": {}, "problems": {}}
    for name in problems:
        bad = [f"rank {r}: {p[name]}" for r, (_, p) in enumerate(everyone) if p[name]]
        if bad:
            out["problems"][name] = "; ".join(bad)
        else:
            worst = max(lt[name] for lt, _ in everyone)
            out["candidates_gbps"][name] = egress / worst / 1e3
    ctx.barrier()
    if not out["candidates_gbps"]:
        return {
            "status": "unavailable",
            "reason": "; ".join(f"{k}: {v}" for k, v in out["problems"].items()),
            **out,
        }
    best = max(out["candidates_gbps"], key=out["candidates_gbps"].get)
    return {"status": "ok", "gbps": out["candidates_gbps"][best], "source": best, **out}
