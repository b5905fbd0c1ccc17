"""Launch-configuration and barrier sweep of the push kernel (GPU only).

For each launch configuration (tile bytes per row, warps), every M is first checked
bit for bit (3 calls, fresh data) and then timed: device µs per call from CUDA
events around bursts of back-to-back eager calls (the stream held by a spin
while the host enqueues), median of bursts per rank, max over ranks; plus CUDA
graph replay per call at the M values in --graph-rows. Results go to stdout and
to a JSON file.

    python scripts/sweep.py --world 2 --placement per-gpu --out DIR
    python scripts/sweep.py --world 8 --placement spread --rows 1 --configs 8192x4 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from logits_gather.bench.plan import NVLS_OFF  # noqa: E402
from scripts.support.dist import run_ranks  # noqa: E402
from scripts.support.placement import placement_env, rank_device  # noqa: E402


def _burst(g, xs, n, start, end, cycles_per_us):
    torch.cuda._sleep(int((20.0 * n + 100) * cycles_per_us))
    g(xs[-1])
    start.record()
    for i in range(n):
        g(xs[i % len(xs)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def _graph_us(g, xs, calls, replays, start, end, cycles_per_us):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g(xs[0])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [g(xs[i % len(xs)]) for i in range(calls)]
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(5):
        torch.cuda._sleep(int((10.0 * calls * replays + 100) * cycles_per_us))
        graph.replay()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (calls * replays))
    return statistics.median(times), outs


def _rank(rank, world, a):
    from logits_gather import LogitsGather
    from logits_gather.push import Config

    device = rank_device(rank, a.placement)
    columns = a.vocab // world
    cap = max(a.rows)
    g = LogitsGather(
        columns=columns,
        capacity=cap,
        device=device,
        dtype=torch.bfloat16,
        timeout_s=20.0,
        on_timeout=a.on_timeout,
    )
    assert g.backend == "symm_mem", g.backend
    gen = torch.Generator(device=device)
    fulls, xs = [], []
    for s in range(4):
        gen.manual_seed(1000 + s)
        raw = torch.randint(
            -(2**15), 2**15, (cap, world * columns), dtype=torch.int16, device=device, generator=gen
        )
        fulls.append(raw.view(torch.bfloat16))
        xs.append(fulls[-1][:, rank * columns : (rank + 1) * columns].contiguous())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    end.synchronize()
    cycles_per_us = 2_000_000 / (start.elapsed_time(end) * 1e3)

    def parse(c: str):  # "8192x4": tile bytes x warps
        tile, warps = c.split("x")
        return Config(int(tile), int(warps))

    configs = [parse(c) for c in a.configs.split(",")]
    results = []
    for cfg in configs:
        t0 = time.monotonic()
        g._impl.replan([cfg])
        compile_s = time.monotonic() - t0
        dist.barrier()
        for m in a.rows:
            sub = [x[:m] for x in xs]
            wrong = 0
            for k in range(3):
                out = g(sub[k])
                wrong += int(not torch.equal(out.view(torch.int16), fulls[k][:m].view(torch.int16)))
            torch.cuda.synchronize()
            n = max(5, min(200, int(20_000 / (5 + m))))
            times = [_burst(g, sub, n, start, end, cycles_per_us) for _ in range(5)]
            rec = {
                "tile_bytes": cfg.tile_bytes,
                "warps": cfg.warps,
                "m": m,
                "grid": g._impl.plan[m][1],
                "us": statistics.median(times),
                "wrong": wrong,
                "compile_s": compile_s,
            }
            if m in a.graph_rows:
                rec["graph_us"], outs = _graph_us(g, sub, 20, 10, start, end, cycles_per_us)
                rec["wrong"] += int(
                    not torch.equal(outs[-1].view(torch.int16), fulls[19 % 4][:m].view(torch.int16))
                )
            results.append(rec)
    g.check()
    everyone = [None] * world
    dist.all_gather_object(everyone, results)
    merged = []
    for i, rec in enumerate(everyone[0]):
        rec = dict(rec)
        rec["us"] = max(r[i]["us"] for r in everyone)
        if "graph_us" in rec:
            rec["graph_us"] = max(r[i]["graph_us"] for r in everyone)
        rec["wrong"] = sum(r[i]["wrong"] for r in everyone)
        merged.append(rec)
    return merged


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--placement", default="per-gpu", choices=("per-gpu", "spread", "one-gpu"))
    p.add_argument("--vocab", type=int, default=151552)
    p.add_argument("--rows", default="1,2,4,8,16,32,64,128,256")
    p.add_argument("--graph-rows", default="1,64")
    p.add_argument("--configs", default="2048x4,4096x4,8192x4,4096x8,8192x8,1024x2")
    p.add_argument("--on-timeout", default="raise", choices=("raise", "trap"))
    p.add_argument("--out", default="sweep-out")
    a = p.parse_args()
    a.rows = [int(r) for r in a.rows.split(",")]
    a.graph_rows = [int(r) for r in a.graph_rows.split(",") if r]
    os.environ.update(NVLS_OFF)
    res = run_ranks(_rank, a.world, a, env=placement_env(a.placement), timeout=580)[0]
    os.makedirs(a.out, exist_ok=True)
    name = f"sweep_tp{a.world}_{a.placement}_V{a.vocab}.json"
    with open(os.path.join(a.out, name), "w") as f:
        json.dump({"args": vars(a), "results": res}, f, indent=1)
    print(f"tp={a.world} {a.placement} V={a.vocab} bf16: device µs per call (max over ranks)")
    print(f"{'config':>9} {'M':>4} {'grid':>4} {'us':>8} {'graph':>8} wrong")
    for r in res:
        g = f"{r['graph_us']:8.2f}" if "graph_us" in r else " " * 8
        cfg = f"{r['tile_bytes']!s:>6}x{r['warps']!s:<2}"
        print(f"{cfg} {r['m']:>4} {r['grid']:>4} {r['us']:8.2f} {g} {r['wrong']}")
    print(f"wrote {name}")


if __name__ == "__main__":
    main()
