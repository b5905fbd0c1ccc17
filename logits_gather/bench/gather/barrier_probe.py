"""The barrier floor of the limit: an independent minimal all-ranks barrier.

It shares no code with ``logits_gather.kernel``, so the floor does not move when
our barrier gets slower (a floor taken from ours at M=1 would flatter ours exactly
then).

Protocol (one CTA per rank, one warp):

1. ``epoch = counter[0]``: a per-rank launch counter kept on the device, so the
   launch has fixed arguments and can be captured in a CUDA graph and replayed.
2. Signal every rank at once, itself included: ONE vector
   ``atomic_add(flag_ptrs[lane], 1, mask=lane < world, sem=release, scope=sys)``
   whose lanes are the ranks' flag addresses. Scalar atomics issued one after
   another would each wait out an NVLink round trip.
3. Spin with an acquire read (``atomic_add(own_flag, 0)``) until the own flag
   reaches ``world * (epoch + 1)``. Flags only grow, so a rank already in the next
   epoch cannot confuse a slow one; no rank can run two epochs ahead.
4. ``counter[0] = epoch + 1``.

A spin that lasts ``timeout_ns`` (globaltimer) gives up and sets ``counter[1]``;
later launches see it and skip the wait, so a dead peer costs one timeout, not a
hang. The host reads ``counter[1]`` after timing and reports the probe unavailable.

Timing: ``CAPTURED`` launches in one CUDA graph, replayed back to back between
CUDA events (after a spin that lets the host enqueue, and one replay that lines
the ranks up); µs per launch, median over bursts per rank, max over ranks.
Triton is imported lazily.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

CAPTURED = 20
TIMEOUT_NS = 2_000_000_000
_KERNEL: Any = None
tl: Any = None
globaltimer: Any = None


def kernel() -> Any:
    """The Triton kernel, built on first use."""
    global _KERNEL, tl, globaltimer  # module globals: the JIT resolves names there
    if _KERNEL is None:
        import triton
        import triton.language as tl
        from triton.language.extra.cuda import globaltimer

        @triton.jit(do_not_specialize=["world", "timeout_ns"])
        def _barrier(flag_ptrs, own_flag, counter, world, timeout_ns, WORLD_P2: tl.constexpr):
            lane = tl.arange(0, WORLD_P2)
            mask = lane < world
            epoch = tl.load(counter)
            dead = tl.load(counter + 1)
            addrs = tl.load(flag_ptrs + lane, mask=mask, other=0)
            peers = addrs.to(tl.pointer_type(tl.int32))
            tl.atomic_add(peers, 1, mask=mask, sem="release", scope="sys")
            target = world * (epoch + 1)
            limit = tl.where(dead != 0, 0, timeout_ns)
            t0 = globaltimer()
            seen = tl.atomic_add(own_flag, 0, sem="acquire", scope="sys")
            waited = globaltimer() - t0
            while (seen < target) & (waited < limit):
                seen = tl.atomic_add(own_flag, 0, sem="acquire", scope="sys")
                waited = globaltimer() - t0
            if seen < target:
                tl.store(counter + 1, 1)
            tl.store(counter, epoch + 1)

        _KERNEL = _barrier
    return _KERNEL


class BarrierProbe:
    """One rank's flag, its view of every rank's flag, and the launch."""

    def __init__(self, ctx: Any) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        w, dev = ctx.world, ctx.device
        self.world = w
        self.flag = symm_mem.empty(4, dtype=torch.int32, device=dev)
        self.flag.zero_()
        self.handle = symm_mem.rendezvous(self.flag, ctx.group)
        offset = self.flag.data_ptr() - int(self.handle.buffer_ptrs[ctx.rank])  # bases only
        self.ptrs = torch.tensor(
            [int(self.handle.buffer_ptrs[p]) + offset for p in range(w)],
            dtype=torch.int64,
            device=dev,
        )
        self.counter = torch.zeros(2, dtype=torch.int32, device=dev)
        self.p2 = max(2, 1 << (w - 1).bit_length())
        torch.cuda.synchronize(dev)
        self.handle.barrier(channel=0)  # every flag is zero before anyone signals

    def __call__(self, _: Any = None) -> None:
        kernel()[(1,)](
            self.ptrs,
            self.flag,
            self.counter,
            self.world,
            TIMEOUT_NS,
            WORLD_P2=self.p2,
            num_warps=1,
        )

    def timed_out(self) -> bool:
        return bool(self.counter[1].item())

    def launches(self) -> int:
        return int(self.counter[0].item())


def barrier_latency(ctx: Any, clock: Any, keep: list[Any]) -> dict[str, Any]:
    """The floor: µs per launch of the probe under graph replay (max over ranks), or
    why it could not be measured. Collective; ``keep`` holds the symmetric flag."""
    from .side import failure_text

    if not ctx.cuda:
        return {"status": "unavailable", "reason": "needs CUDA (this run is on CPU)"}
    problem, probe, graph = None, None, None
    try:
        probe = BarrierProbe(ctx)
        keep.append(probe)
        for _ in range(3):  # compiles, then warm
            probe()
        ctx.sync()
        graph, _ = clock.capture(lambda _x: probe(), [None] * CAPTURED)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        problem = failure_text(exc)
    reason = ctx.first_reason(problem)
    if reason:
        return {"status": "unavailable", "reason": reason}
    replays = max(3, min(50, ctx.cfg.replays * 5))
    times = [clock.replay(graph, replays, CAPTURED) for _ in range(max(3, ctx.cfg.bursts))]
    ctx.sync()
    dead = ctx.first_reason(
        "a spin timed out (a peer never signalled)" if probe.timed_out() else None
    )
    expected = 3 + 3 + CAPTURED * len(times) * (replays + 1)  # eager, capture warm-up, replays
    count, flag = probe.launches(), int(probe.flag[0].item())
    wrong = ctx.first_reason(
        None
        if (count, flag) == (expected, expected * ctx.world)
        else f"ran {count} epochs with flag {flag}, expected {expected} and {expected * ctx.world}"
    )
    local = statistics.median(times)
    per_rank = ctx.gather(local)
    del graph
    if dead or wrong:
        return {"status": "unavailable", "reason": dead or wrong}
    return {
        "status": "ok",
        "us": max(per_rank),
        "per_rank": per_rank,
        "launches_per_graph": CAPTURED,
        "replays": replays,
        "source": "independent probe: one CTA per rank signals every rank with one vector "
        "release atomic, then acquire-spins on its own flag; CUDA-graph replay",
    }
