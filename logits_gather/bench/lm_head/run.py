"""``--head H``: the LM head plus the gather, four ways, interleaved in one run.

Per rank: a random ``[V/tp, H]`` weight (seeded by rank, generated on the device) and
``--sets`` random hidden states ``[capacity, H]`` shared by every rank. At each M:

* ``cublas+stock``: ``F.linear``, then ``all_gather_into_tensor`` (NCCL; gloo on CPU)
  and the permute copy into ``[M, V]``, as vLLM does it;
* ``cublas+ours``: ``F.linear``, then ``LogitsGather.__call__``;
* ``fused``: ``LogitsGather.linear`` (the fused kernel where the tile table takes it,
  else ``F.linear`` + the gather: the path column says which);
* ``head alone``: ``F.linear`` (no gather: the floor every other method pays).

Inputs and the correctness gate: ``gate.py``. Then device time per call with the gather
benchmark's clocks and bursts (``timing.py``): two passes, the second in reverse
order, median over bursts per rank, max over ranks. At world size 1 there are no
peers: ``fused`` against ``head alone`` is the point there. Graph replay and host
cost are not timed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..gather.methods import ALL_GATHER
from ..progress import Progress
from ..timing import burst_size, make_clock, schedule, summarize
from .gate import check_all, hidden_sets, weight_of
from .report import finish

METHODS = ("cublas+stock", "cublas+ours", "fused", "head alone")


class Stock:
    """``F.linear`` + vLLM's gather: ``all_gather_into_tensor`` into ``[tp*M, N]``, then
    the permute copy into ``[M, tp*N]`` (a copy at every tp, so tp=1 pays it too)."""

    def __init__(self, ctx: Any, weight: torch.Tensor, capacity: int) -> None:
        self.ctx, self.w = ctx, weight
        n = weight.shape[0]
        self.staging = torch.empty((ctx.world * capacity, n), dtype=weight.dtype, device=ctx.device)
        self.out = torch.empty((capacity, ctx.world * n), dtype=weight.dtype, device=ctx.device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m, n, w = x.shape[0], self.w.shape[0], self.ctx.world
        shard = F.linear(x, self.w)
        staging = self.staging[: w * m]
        ALL_GATHER(staging, shard, group=self.ctx.group)
        out = self.out[:m]
        out.view(m, w, n).copy_(staging.view(w, m, n).movedim(0, 1))
        return out


def build(ctx: Any, columns: int, weight: torch.Tensor) -> tuple[Any, dict[str, Callable]]:
    from logits_gather import LogitsGather

    cfg = ctx.cfg
    g = LogitsGather(
        columns, cfg.capacity, device=ctx.device, dtype=cfg.torch_dtype, backend=cfg.ours_backend
    )
    stock = Stock(ctx, weight, cfg.capacity)
    calls = {
        "cublas+stock": stock,
        "cublas+ours": lambda x: g(F.linear(x, weight)),
        "fused": lambda x: g.linear(x, weight),
        "head alone": lambda x: F.linear(x, weight),
    }
    return g, calls


def time_row(
    ctx: Any, clock: Any, calls: dict[str, Callable], xs: list, m: int, bar: Progress
) -> dict:
    """Device µs per call of every method at ``m``, interleaved: two passes, the second in
    reverse order, each method's bursts back to back."""
    cfg = ctx.cfg
    inputs = [x[:m] for x in xs]
    est: dict[str, float] = {}
    iters: dict[str, int] = {}
    samples: dict[str, list[list[float]]] = {name: [[], []] for name in calls}
    for p in (0, 1):
        for name in list(calls) if p == 0 else list(reversed(calls)):
            bar.label(f"M={m} {name}")
            ctx.beat(f"M={m} {name}")
            call = calls[name]
            if p == 0:
                est[name] = max(ctx.gather(clock.wall(call, schedule(inputs, cfg.warmup))))
                iters[name] = burst_size(est[name], cfg.budget_ms, cfg.iters, 4)
            for b in range(cfg.bursts):
                seq = schedule(inputs, iters[name], start=b)
                samples[name][p].append(clock.burst(call, seq, est[name]))
    gathered = ctx.gather(samples)
    return {
        name: {**summarize([g[name] for g in gathered]), "iters": iters[name]} for name in calls
    }


def run_head(ctx: Any) -> None:
    """The ``--head`` run on this rank, from inputs to the report (rank 0 writes it)."""
    from .. import machine

    cfg = ctx.cfg
    info = machine.describe(ctx) if ctx.rank == 0 else None
    clock = make_clock(ctx)
    results, keep = [], []  # every LogitsGather lives until all ranks are done
    steps = len(cfg.vocabs) * (len(cfg.rows) + 1)
    with Progress(total=steps, enabled=ctx.rank == 0) as bar:
        for vocab in cfg.vocabs:
            results.append(_bench_vocab(ctx, clock, vocab, bar, keep))
    ctx.beat("report")
    if ctx.rank == 0:
        finish(info, ctx, results)
    ctx.sync()
    ctx.barrier()
    keep.clear()
    bad = [
        f"V={r['vocab']} {n}: {st['reason']}"
        for r in results
        for n, st in r["methods"].items()
        if st["status"] != "ok"
    ]
    if bad:  # every rank raises: a run with a wrong or failed method must not exit 0
        raise RuntimeError("the --head check failed: " + "; ".join(bad))


def _bench_vocab(ctx: Any, clock: Any, vocab: int, bar: Progress, keep: list) -> dict[str, Any]:
    """One vocabulary size: inputs, the gate, then every M timed (one bar step each)."""
    from logits_gather.head.route import kernel_problem, planned_path

    cfg = ctx.cfg
    columns = vocab // ctx.world
    bar.label(f"V={vocab} build and check")
    ctx.beat(f"V={vocab} inputs")
    make = dict(seed=cfg.seed, hidden=cfg.head, dtype=cfg.torch_dtype, device=ctx.device)
    weight = weight_of(ctx.rank, columns=columns, **make)
    xs = hidden_sets(sets=cfg.sets, capacity=cfg.capacity, **{**make, "hidden": cfg.head})
    g, calls = build(ctx, columns, weight)
    kernel = kernel_problem(world_size=g.world_size, backend=g.backend, device=g.device)
    paths = {
        m: planned_path(m, cfg.head, columns=columns, dtype=cfg.torch_dtype, kernel=kernel)
        for m in cfg.rows
    }
    ctx.beat(f"V={vocab} check")
    status = check_all(ctx, calls, xs[0], weight, columns, paths, make)
    bar.step()
    rows = []
    if all(st["status"] == "ok" for st in status.values()):
        for m in cfg.rows:
            rows.append(
                {"m": m, "path": paths[m], "device_us": time_row(ctx, clock, calls, xs, m, bar)}
            )
            bar.step()
    keep.append(g)
    del calls, weight, xs
    ctx.sync()
    ctx.barrier()
    return {
        "vocab": vocab,
        "columns": columns,
        "hidden": cfg.head,
        "backend": g.backend,
        "methods": status,
        "rows": rows,
    }
