"""One rank of the sampling benchmark: build the methods per profile and M, check them,
time them.

First the copy bandwidth behind the read limit (``readlimit.py``). Then per profile
(``profiles.py``) and M: the profile's bf16 rows (every rank builds the same full rows
and keeps its own columns) and temperatures, their entropy, one copy per method made
before any timing; a check pass (greedy tokens must be equal across methods, the other ops'
agreement with vLLM is counted, and every method's input must be unchanged); then two
timed passes in which every (op, method) burst is interleaved with the others, and,
on CUDA, the same under graph replay for every call that captures.
"""

from __future__ import annotations

import gc
import types
from typing import Any

import torch
import torch.distributed as dist

from ..progress import Progress
from ..timing import make_clock
from . import peers, profiles, readlimit

PASSES = 2


def _inputs(m: int, n: int, rank: int, device: torch.device, profile: str = "t08", world: int = 1):
    """This rank's ``[m, n]`` bf16 shard of the profile's rows, the temperatures, seeds
    and positions; and the entropy of the full rows (nats, None for greedy rows)."""
    full, temp = profiles.make(profile, m, n * world, seed=0)
    full = full.to(torch.bfloat16)
    shard = full[:, rank * n : (rank + 1) * n].contiguous().to(device)
    seeds = torch.randint(-(2**62), 2**62, (m,), generator=torch.Generator().manual_seed(m))
    positions = torch.arange(m, dtype=torch.int64) + 17
    inputs = shard, temp.to(device), seeds.to(device), positions.to(device)
    return inputs, profiles.entropy(full, temp)


def _methods(shard, temp, seeds, pos, capacity: int, kernels: Any) -> tuple[dict, dict]:
    """{method: calls} and {method: its own input}, each input a fresh copy."""
    own = {name: shard.clone() for name in ("ours", "vllm", "torch")}
    calls = {
        "ours": peers.ours_calls(own["ours"], temp, seeds, pos, capacity=capacity),
        "torch": peers.torch_calls(own["torch"], temp, seeds, pos),
    }
    if kernels is not None:
        calls["vllm"] = peers.vllm_calls(own["vllm"], temp, seeds, pos, kernels=kernels)
    return calls, {k: v for k, v in own.items() if k in calls}


def _check(calls: dict, own: dict, shard: torch.Tensor, m: int) -> dict[str, Any]:
    """Greedy equality, agreement shares against vLLM, and untouched inputs."""
    out: dict[str, Any] = {"problems": [], "agreement": {}}
    toks = {meth: {op: fn().clone() for op, fn in fns.items()} for meth, fns in calls.items()}
    for meth in calls:
        if not torch.equal(toks[meth]["greedy"], toks["ours"]["greedy"]):
            out["problems"].append(f"greedy M={m}: {meth}'s tokens differ from ours")
        if not torch.equal(own[meth], shard):
            out["problems"].append(f"M={m}: {meth} modified its input logits")
    if "vllm" in toks:
        for op in peers.OPS:
            same = (toks["ours"][op] == toks["vllm"][op]).double().mean().item()
            out["agreement"][op] = same
    return out


def _time_eager(clock, calls: dict, iters: int, host_us: dict) -> dict:
    """{(op, method): [pass][burst] per-call µs}, every burst interleaved."""
    times: dict = {}
    xs = [None] * iters
    for p in range(PASSES):
        for _ in range(2):
            for op in peers.OPS:
                for meth, fns in calls.items():
                    call = fns[op]
                    t = clock.burst(lambda _x, c=call: c(), xs, host_us[op, meth])
                    times.setdefault((op, meth), [[] for _ in range(PASSES)])[p].append(t)
    return times


def _time_graphs(clock, calls: dict, graph_calls: int, replays: int) -> tuple[dict, dict]:
    """Graph replay per (op, method) that captures; {(op, method): why} for the rest."""
    graphs, why = {}, {}
    xs = [None] * graph_calls
    for op in peers.OPS:
        for meth, fns in calls.items():
            try:
                graphs[op, meth] = clock.capture(lambda _x, c=fns[op]: c(), xs)[0]
            except Exception as exc:  # not capturable: reported, the run goes on
                why[op, meth] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                torch.cuda.synchronize()
    times: dict = {}
    for p in range(PASSES):
        for key, graph in graphs.items():
            t = clock.replay(graph, replays, graph_calls)
            times.setdefault(key, [[] for _ in range(PASSES)])[p].append(t)
    return times, why


def _host_guess(clock, calls: dict, cuda: bool) -> dict:
    """Wall µs per call (device included): sizes the spin before each CUDA burst."""
    if not cuda:
        return {(op, m): 0.0 for m, fns in calls.items() for op in fns}
    return {
        (op, m): clock.wall(lambda _x, c=fn: c(), [None] * 3)
        for m, fns in calls.items()
        for op, fn in fns.items()
    }


def _one(clock, args: Any, kernels: Any, inputs: tuple, m: int, cuda: bool) -> dict:
    """One profile at one M: warm-up, the check, eager timing, graph replay."""
    shard, temp, seeds, pos = inputs
    calls, own = _methods(shard, temp, seeds, pos, max(args.rows), kernels)
    for fns in calls.values():  # warm up: compiles kernels, builds exchanges
        for fn in fns.values():
            fn()
    out: dict[str, Any] = {"check": _check(calls, own, shard, m)}
    host = _host_guess(clock, calls, cuda)
    out["eager"] = _time_eager(clock, calls, args.iters, host)
    if args.graphs and cuda:
        out["graph"], out["not_captured"] = _time_graphs(
            clock, calls, args.graph_calls, args.replays
        )
    out["check"]["problems"] += [
        f"M={m}: {meth} modified its input logits while timed"
        for meth in own
        if not torch.equal(own[meth], shard)
    ]
    return out


def measure(rank: int, world: int, args: Any, kernels: Any, beat: Any = None) -> dict[str, Any]:
    """Everything this rank measured, for rank 0's report: ``{"copy": bandwidth,
    "profiles": {profile: {"eager", "graph", "not_captured", "check", "entropy"}}}``,
    each keyed by M."""
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    ctx = types.SimpleNamespace(cuda=cuda, barrier=dist.barrier)
    clock = make_clock(ctx)
    beat = beat or (lambda _label: None)
    n = args.vocab // world
    result: dict[str, Any] = {"copy": readlimit.copy_bandwidth(clock, device), "profiles": {}}
    steps = len(args.profiles) * len(args.rows)
    with Progress(total=steps, enabled=rank == 0) as bar:
        for profile in args.profiles:
            mine = result["profiles"][profile] = {
                "eager": {},
                "graph": {},
                "not_captured": {},
                "check": {},
                "entropy": {},
            }
            for m in args.rows:
                bar.label(f"{profile} M={m}")
                beat(f"{profile} M={m}")
                inputs, mine["entropy"][m] = _inputs(m, n, rank, device, profile, world)
                got = _one(clock, args, kernels, inputs, m, cuda)
                mine["check"][m], mine["eager"][m] = got["check"], got["eager"]
                if "graph" in got:
                    mine["graph"][m], mine["not_captured"][m] = got["graph"], got["not_captured"]
                del inputs, got
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                bar.step()
    return result
