"""Tile sweep of the fused head kernel at world size 1, against cuBLAS ``F.linear``.

For every (M, H, columns) of the issue's grid (M in 1, 4, 16, 64, 128, 256; H in 4096,
5120, 7168; columns = 151552 / tp for tp 2, 4, 8; bf16) it times ``F.linear`` and each
candidate tile of the kernel (the same kernel ``LogitsGather.linear`` launches, with
no peers), each first checked against ``F.linear`` (relative error of both against an
fp32 reference). Timing: CUDA events around bursts of ``--calls`` back-to-back calls,
median of ``--reps`` bursts, per call; methods interleaved per M. Prints one line per
shape (cuBLAS µs, the best tile, its µs, ratio, weight bandwidth of both) and writes
every figure as JSON (``--out``). ``table.py`` holds the table chosen from it.

    PYTHONPATH=. python scripts/head-sweep.py --out head-sweep.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F

from logits_gather.head.fused import FusedHead, LocalSlots
from logits_gather.head.table import Tile

ROWS = (1, 4, 16, 64, 128, 256)
HIDDEN = (4096, 5120, 7168)
VOCAB, TPS = 151552, (2, 4, 8)
SMALL = (
    Tile(16, 64, 128, 4, 4),
    Tile(16, 128, 128, 4, 4),
    Tile(16, 64, 256, 4, 3),
    Tile(16, 128, 64, 4, 6),
    Tile(16, 256, 64, 8, 4),
    Tile(16, 64, 128, 4, 6),
)
CANDIDATES: dict[int, tuple[Tile, ...]] = {
    1: SMALL,
    4: SMALL,
    16: SMALL,
    64: (
        Tile(64, 64, 128, 4, 4),
        Tile(64, 128, 64, 4, 4),
        Tile(64, 128, 128, 8, 3),
        Tile(64, 64, 64, 4, 6),
        Tile(16, 128, 128, 4, 4),
    ),
    128: (
        Tile(128, 128, 64, 8, 3),
        Tile(128, 64, 128, 4, 4),
        Tile(64, 128, 64, 4, 4),
        Tile(128, 128, 64, 4, 4),
    ),
    256: (
        Tile(128, 128, 64, 8, 3),
        Tile(128, 256, 64, 8, 3),
        Tile(128, 128, 64, 4, 4),
        Tile(64, 128, 64, 4, 4),
    ),
}


def burst_us(fn, calls: int, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="head-sweep.json")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--hidden", default=",".join(map(str, HIDDEN)))
    p.add_argument("--tp", default=",".join(map(str, TPS)))
    a = p.parse_args()
    dev = torch.device("cuda", 0)
    dtype = torch.bfloat16
    results = []
    t0 = time.monotonic()
    for h in map(int, a.hidden.split(",")):
        for tp in map(int, a.tp.split(",")):
            columns = VOCAB // tp
            gen = torch.Generator(device=dev).manual_seed(h + tp)
            weight = (torch.randn(columns, h, device=dev, generator=gen) * 0.02).to(dtype)
            slots = LocalSlots(max(ROWS), columns, dtype, dev)
            head = FusedHead(
                slots, capacity=max(ROWS), dtype=dtype, device=dev, graphs=False, agree=list
            )
            gbytes = weight.numel() * 2 / 1e9
            for m in ROWS:
                hidden = torch.randn(m, h, device=dev, generator=gen).to(dtype)
                ref = hidden.float() @ weight.float().T
                cublas_err = rel(F.linear(hidden, weight), ref)
                row = {"m": m, "h": h, "columns": columns, "cublas_rel_err": cublas_err}
                row["cublas_us"] = burst_us(partial(F.linear, hidden, weight), a.calls, a.reps)
                tiles = {}
                for tile in CANDIDATES[m]:
                    tile = tile.fit(h)
                    head.compile(h, tile)
                    err = rel(head(hidden, weight, tile), ref)
                    if not err <= max(2 * cublas_err, 1e-3):
                        tiles[str(tile)] = {"error": err}
                        continue
                    us = burst_us(partial(head, hidden, weight, tile), a.calls, a.reps)
                    tiles[str(tile)] = {"us": us, "rel_err": err, "tile": tile.__dict__}
                row["cublas_us_again"] = burst_us(
                    partial(F.linear, hidden, weight), a.calls, a.reps
                )
                row["tiles"] = tiles
                timed = {k: v for k, v in tiles.items() if "us" in v}
                best = min(timed, key=lambda k: timed[k]["us"]) if timed else None
                row["best"] = best
                cub = min(row["cublas_us"], row["cublas_us_again"])
                if best:
                    b = timed[best]["us"]
                    print(
                        f"M={m:3d} H={h} cols={columns:6d}: cublas {cub:7.1f} us "
                        f"({gbytes / cub * 1e6 / 1e3:4.2f} TB/s)  best {best} {b:7.1f} us "
                        f"({gbytes / b * 1e6 / 1e3:4.2f} TB/s)  ratio {b / cub:5.3f}",
                        flush=True,
                    )
                else:
                    print(f"M={m} H={h} cols={columns}: no tile passed: {tiles}", flush=True)
                results.append(row)
            weight = slots = head = None
            torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"sweep done in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
