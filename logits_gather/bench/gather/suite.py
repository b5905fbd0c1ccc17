"""One vocabulary size, start to finish: build, check, time every M, derive the figures."""

from __future__ import annotations

from typing import Any

import torch

from ..timing import burst_size, schedule, summarize
from . import limit as limit_mod
from . import side
from .inputs import InputSets, check
from .methods import BUILDERS, Method

GRAPHED = ("stock", "ours")


def _build(ctx: Any, columns: int, mine: list[torch.Tensor]) -> tuple[dict, dict]:
    """Available methods by name, and every method's status entry."""
    methods: dict[str, Method] = {}
    status: dict[str, dict[str, Any]] = {}
    for name in (n for n in ctx.cfg.methods if n in BUILDERS):
        ctx.beat(f"build {name}")
        meth = BUILDERS[name](ctx, columns, mine)
        for step in (meth.check, meth.setup):
            try:
                problem = step()
            except Exception as exc:  # noqa: BLE001 - becomes an "unavailable" row
                problem = side.failure_text(exc)
            reason = ctx.first_reason(problem)
            if reason:
                status[name] = {"status": "unavailable", "reason": reason}
                break
        else:
            methods[name] = meth
            status[name] = {"status": "ok", "detail": meth.detail}
    return methods, status


def _gate(ctx: Any, data: InputSets, methods: dict[str, Method], status: dict) -> None:
    """Before any timing: every method, every M, three calls each, compared bit for bit
    with ``torch.cat`` of all shards. A wrong method is never timed."""
    for name, meth in list(methods.items()):
        ctx.beat(f"check {name}")
        problem = None
        try:  # no early exit on a mismatch: every rank must make the same collective calls
            for m in ctx.cfg.rows:
                xs = meth.inputs(m)
                for k in range(3):
                    diff = check(meth(xs[k % len(xs)]), data.expected(k % len(xs), m))
                    if diff and not problem:
                        problem = ("WRONG", f"M={m}, call {k}: {diff}")
            ctx.sync()
        except Exception as exc:  # noqa: BLE001
            problem = ("unavailable", f"raised during the check: {side.failure_text(exc)}")
        everyone = ctx.gather(problem)
        bad = [(r, p) for r, p in enumerate(everyone) if p]
        if bad:
            kind = "WRONG" if any(p[0] == "WRONG" for _, p in bad) else "unavailable"
            status[name] = {
                "status": kind,
                "reason": "; ".join(f"rank {r}: {p[1]}" for r, p in bad),
            }
            meth.close()
            side.keep_alive(meth)
            del methods[name]


def _row(
    ctx: Any, clock: Any, data: InputSets, methods: dict[str, Method], ws1: Any, m: int, bar: Any
) -> dict[str, Any]:
    cfg, w, item = ctx.cfg, ctx.world, data.shards[0][0].element_size()
    row: dict[str, Any] = {
        "m": m,
        "egress_bytes": (w - 1) * m * data.columns * item,
        "device_us": {},
        "host_us": {},
        "graph_us": {},
    }
    xs = {name: meth.inputs(m) for name, meth in methods.items()}
    est, iters, host = {}, {}, {}
    samples: dict[str, list[list[float]]] = {name: [[], []] for name in methods}
    for p in (0, 1):
        for name in list(methods) if p == 0 else list(reversed(methods)):
            meth, bar_label = methods[name], f"M={m} {name}"
            bar.label(bar_label)
            ctx.beat(bar_label)
            if p == 0:
                est[name] = max(ctx.gather(clock.wall(meth, schedule(xs[name], cfg.warmup))))
                iters[name] = burst_size(est[name], cfg.budget_ms, cfg.iters, meth.launches)
            if ctx.cuda and cfg.host:
                calls = burst_size(est[name], 4 * cfg.budget_ms, cfg.host_calls, meth.launches)
                guess = min(est[name], 1000.0)  # host µs per call, to size the spin
                host.setdefault(name, []).append(clock.host(meth, schedule(xs[name], calls), guess))
            host_us = min(host[name]) if name in host else est[name]
            for b in range(cfg.bursts):
                seq = schedule(xs[name], iters[name], start=b)
                samples[name][p].append(clock.burst(meth, seq, host_us))
    gathered = ctx.gather((samples, host))
    for name in methods:
        row["device_us"][name] = {
            **summarize([g[0][name] for g in gathered]),
            "iters": iters[name],
            "bursts": cfg.bursts,
        }
        if name in host:
            row["host_us"][name] = summarize([[[h] for h in g[1][name]] for g in gathered])
    if ws1 is not None and ws1.reason is None:
        ctx.beat(f"M={m} world-size-1 NCCL")
        mine = [s[:m] for s in data.mine(ctx.rank)]
        costs = ws1.host_costs(clock, mine, cfg.host_calls)
        for name in costs:
            row["host_us"][name] = summarize([[[c[name]]] for c in ctx.gather(costs)])
    if ctx.cuda and cfg.graphs:
        for name in (n for n in GRAPHED if n in methods and methods[n].graphable):
            ctx.beat(f"M={m} {name} graph")
            row["graph_us"][name] = _graph(
                ctx,
                clock,
                data,
                methods[name],
                xs[name],
                m,
                est[name],
                row["device_us"][name]["median"],
            )
    return row


def _graph(
    ctx: Any,
    clock: Any,
    data: InputSets,
    meth: Method,
    xs: list[torch.Tensor],
    m: int,
    est: float,
    eager_us: float,
) -> dict[str, Any]:
    cfg, calls = ctx.cfg, ctx.cfg.graph_calls
    graph, outs, problem = None, [], None
    try:
        graph, outs = clock.capture(meth, schedule(xs, calls))
    except Exception as exc:  # noqa: BLE001
        problem = f"capture failed: {side.failure_text(exc)}"
    reason = ctx.first_reason(problem)
    if reason:
        return {"status": "unavailable", "reason": reason}
    replays = max(1, min(cfg.replays, int(cfg.budget_ms * 1e3 / max(est * calls, 0.1))))
    times: list[list[float]] = [[], []]
    for p in (0, 1):
        times[p] = [clock.replay(graph, replays, calls) for _ in range(cfg.bursts)]
    wrong = ctx.first_reason(check(outs[-1], data.expected((calls - 1) % len(xs), m)))
    del graph, outs
    if wrong:
        return {"status": "WRONG", "reason": wrong}
    out = {
        "status": "ok",
        **summarize(ctx.gather(times)),
        "calls_per_graph": calls,
        "replays": replays,
    }
    out["vs_eager"] = out["median"] / eager_us if eager_us else None
    return out


def bench_vocab(ctx: Any, clock: Any, vocab: int, bar: Any, probes: dict[str, Any]) -> dict:
    """Everything for one V; ``probes`` holds the run-wide probes (``limits``: see
    ``limit.probes``; ``ws1``)."""
    cfg = ctx.cfg
    columns = vocab // ctx.world
    ctx.beat(f"V={vocab}: inputs")
    data = InputSets(
        seed=cfg.seed + vocab,
        sets=cfg.sets,
        world=ctx.world,
        capacity=cfg.capacity,
        columns=columns,
        dtype=cfg.torch_dtype,
        device=ctx.device,
    )
    bar.label(f"V={vocab} build and check")
    methods, status = _build(ctx, columns, data.mine(ctx.rank))
    _gate(ctx, data, methods, status)
    kernels = side.nccl_kernels(ctx, methods, cfg.rows)
    ws1 = probes["ws1"]
    bar.step()
    rows = []
    for m in cfg.rows:
        rows.append(_row(ctx, clock, data, methods, ws1, m, bar))
        bar.step()
    limit = limit_mod.derive(rows, probes["limits"], ctx.plan, cfg)
    if "limit" in cfg.methods:
        status["limit"] = {
            "status": "ok" if limit["status"] == "ok" else "unavailable",
            "reason": limit["reason"],
            "detail": "measured ceiling",
        }
    ctx.sync()
    ctx.barrier()
    for name, meth in methods.items():  # same order on every rank: closing may be collective
        try:
            meth.close()
        except Exception as exc:  # noqa: BLE001 - the figures are in; report and go on
            status[name]["close"] = f"close failed: {side.failure_text(exc)}"
        side.keep_alive(meth)
    ctx.sync()
    ctx.barrier()
    return {
        "vocab": vocab,
        "columns_per_rank": columns,
        "dtype": cfg.dtype,
        "methods": status,
        "nccl_kernels": kernels,
        "limit": limit,
        "rows": rows,
        "ws1": None if ws1 is None else (ws1.reason or "ok"),
    }
