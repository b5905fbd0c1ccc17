"""Clocks: device time per call (CUDA events, or perf_counter on CPU), host cost per
eager call, and CUDA-graph replay time. The protocol is in the package docstring."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

Call = Callable[[torch.Tensor], Any]
MAX_QUEUED_LAUNCHES = 600  # below CUDA's pending-launch queue, so issuing never blocks
MAX_PREFILL_US = 200_000.0
# Every timed burst starts after at least this much spinning: the host pauses between
# bursts (agreement between ranks), and a burst that starts on an idle GPU can run below
# full clocks. Measured on 2 H200s: without it, ours at M=1 read 5.56 us here against
# 4.71 us in scripts/sweep.py, whose bursts follow a 4 ms spin (the trap path's fence
# explained part of it: 5.16 vs 4.68 us). With this spin and the fence gone, 4.93 us here
# and 4.83 us in the sweep.
MIN_PREFILL_US = 3000.0


def schedule(xs: Sequence[torch.Tensor], n: int, start: int = 0) -> list[torch.Tensor]:
    """``n`` inputs cycling through the sets, precomputed so the loop does no indexing."""
    return [xs[(start + i) % len(xs)] for i in range(n)]


class CpuClock:
    """gloo ranks on CPU: every call is synchronous, so wall time is the call's time."""

    kind = "perf_counter"

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def burst(self, call: Call, xs: list[torch.Tensor], host_us: float) -> float:
        self.ctx.barrier()
        t0 = time.perf_counter()
        for x in xs:
            call(x)
        return (time.perf_counter() - t0) * 1e6 / len(xs)

    def wall(self, call: Call, xs: list[torch.Tensor]) -> float:
        return self.burst(call, xs, 0.0)


class CudaClock:
    """CUDA events around a burst of back-to-back calls.

    Before the burst the stream is held by a spin kernel (``torch.cuda._sleep``) long
    enough for the host to enqueue the whole burst, so events measure device time,
    not how fast Python issues calls. One untimed call after the spin lines the
    ranks up (every method is a collective) before the start event."""

    kind = "cuda_events"

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        cycles = 2_000_000
        self.start.record()
        torch.cuda._sleep(cycles)
        self.end.record()
        self.end.synchronize()
        self.cycles_per_us = cycles / max(1.0, self.start.elapsed_time(self.end) * 1e3)

    def prefill(self, us: float) -> None:
        torch.cuda._sleep(int(min(max(us, MIN_PREFILL_US), MAX_PREFILL_US) * self.cycles_per_us))

    def burst(self, call: Call, xs: list[torch.Tensor], host_us: float) -> float:
        self.prefill(1.5 * host_us * (len(xs) + 1) + 50)
        call(xs[-1])
        self.start.record()
        for x in xs:
            call(x)
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3 / len(xs)

    def wall(self, call: Call, xs: list[torch.Tensor]) -> float:
        """Wall time per call including the device: used only to size bursts."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x in xs:
            call(x)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e6 / len(xs)

    def host(self, call: Call, xs: list[torch.Tensor], guess_us: float) -> float:
        """Host cost of one eager call: wall time of issuing ``len(xs)`` calls without
        synchronising (the device is held by a spin so the queue never drains into
        the measurement), divided by the count."""
        torch.cuda.synchronize()
        self.prefill(guess_us * len(xs) * 2 + 200)
        t0 = time.perf_counter()
        for x in xs:
            call(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) * 1e6 / len(xs)

    def capture(self, call: Call, xs: list[torch.Tensor]) -> tuple[Any, list[Any]]:
        """A CUDA graph of ``len(xs)`` calls (after eager warm-up on a side stream)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x in xs[:3]:
                call(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            outs = [call(x) for x in xs]
        torch.cuda.synchronize()
        return graph, outs

    def replay(self, graph: Any, replays: int, calls: int) -> float:
        """Device time per captured call under back-to-back replays."""
        self.prefill(20.0 * (replays + 1) + 50)
        graph.replay()  # lines the ranks up
        self.start.record()
        for _ in range(replays):
            graph.replay()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3 / (replays * calls)


def make_clock(ctx: Any) -> CpuClock | CudaClock:
    return CudaClock(ctx) if ctx.cuda else CpuClock(ctx)


def burst_size(est_us: float, budget_ms: float, most: int, launches: int) -> int:
    """Calls per burst: about ``budget_ms`` of device time, at least 3, at most ``most``,
    and never more launches than the queue holds."""
    by_budget = int(budget_ms * 1e3 / max(est_us, 0.1))
    return max(3, min(most, by_budget, MAX_QUEUED_LAUNCHES // max(1, launches)))


def summarize(per_rank_passes: list[list[list[float]]]) -> dict[str, Any]:
    """``per_rank_passes[rank][pass]`` = per-call times of each burst. Median per rank,
    then the max across ranks; the same per pass, and the spread between passes."""
    per_rank = [statistics.median([t for p in passes for t in p]) for passes in per_rank_passes]
    passes = [
        max(statistics.median(pr[i]) for pr in per_rank_passes)
        for i in range(len(per_rank_passes[0]))
    ]
    spread = (max(passes) - min(passes)) / min(passes) * 100 if min(passes) > 0 else None
    return {
        "median": max(per_rank),
        "passes": passes,
        "spread_pct": spread,
        "per_rank": per_rank,
        "worst_rank": per_rank.index(max(per_rank)),
    }
