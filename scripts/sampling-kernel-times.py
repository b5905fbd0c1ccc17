"""Where the fused sampling time goes: each Triton kernel alone, on one GPU.

``python scripts/sampling-kernel-times.py [--columns 75776] [--world 2] [--rows 1,16,64,256]``

Runs rank 0's local kernel and the final kernel of every fused operation at the
tp=2 geometry (``columns`` per rank, ``world`` ranks' payloads faked by copying
rank 0's) and prints microseconds per launch (CUDA events over a burst, median of
bursts; a CUDA graph of one launch, so no host overhead). No exchange runs: add
the exchange's own time from the gather benchmark. With ``TRITON_INTERPRET=1`` it
runs on the CPU for a logic smoke test (times are meaningless there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from logits_gather.sampling import fused


class _Split:
    """An exchange stand-in: ``send`` returns rank 0's payload repeated ``world`` times."""

    def __init__(self, width: int, m: int, world: int, device: torch.device) -> None:
        self.width, self.world = width, world
        self.payload = torch.zeros(m, width, device=device)
        self.out = torch.zeros(m, world, width, device=device)
        self.log: list[str] = []

    def send(self, m: int) -> torch.Tensor:
        self.log.append("send")
        self.out[:m].copy_(self.payload[:m, None, :].expand(m, self.world, self.width))
        return self.out[:m]


def _time(fn, device: torch.device, iters: int = 100, reps: int = 7) -> float:
    fn()
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            graph.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / iters)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser(prog="python scripts/sampling-kernel-times.py")
    p.add_argument("--columns", type=int, default=75776)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rows", default="1,16,64,256")
    args = p.parse_args()
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    device = torch.device("cpu" if interp else "cuda")
    f = fused.Fused(args.columns, args.world, 0)
    k = f.k
    print(
        f"columns={args.columns} world={args.world} block={f.block} splits={f.splits} "
        f"(us per launch, graph replay)"
    )
    print(f"{'kernel':<28}" + "".join(f"{'M=' + m:>10}" for m in args.rows.split(",")))
    rows = [int(m) for m in args.rows.split(",")]
    table: dict[str, list[float]] = {}
    for m in rows:
        x = (torch.randn(m, args.columns, device=device) * 3).to(torch.bfloat16)
        t = torch.full((m,), 0.8, device=device)
        seed = torch.arange(m, device=device)
        ids = torch.randint(0, args.columns * args.world, (m,), device=device)
        c = args.world * f.splits
        cand = max(2, fused._pow2(c))
        for name, op, room in (
            ("greedy", "greedy", 0),
            ("sample", "sample", 0),
            ("sample_k50", "sample_k", 64),
            ("logprobs_n5", "logprobs", 8),
        ):
            ex = _Split(f.width(op, room), m, args.world, device)
            xs = (x, x.stride(0))
            tail = (ex.payload, ex.width // 2, f.columns, f.col0)
            if name == "greedy":
                local = (k.greedy_local, xs + tail, {"BLOCK": f.block})
            elif name.startswith("sample"):
                local = (k.sample_local, xs + (t, seed) + tail, {"BLOCK": f.block, "KP": room})
            else:
                local = (k.logprobs_local, xs + (ids,) + tail, {"BLOCK": f.block, "NP": room})
            fn, a, const = local
            table.setdefault(f"{name} local", []).append(
                _time(
                    lambda fn=fn, a=a, const=const, m=m: f.launch(
                        fn, (m, f.splits), a, const, f.warps
                    ),
                    device,
                )
            )
            g = ex.send(m)
            out = torch.empty(m, dtype=torch.int64, device=device)
            rw = args.world * ex.width // 2
            if name == "greedy":
                final = (k.greedy_final, (g, out, rw, c), {"CAND": cand}, 1)
            elif name == "sample":
                final = (
                    k.sample_final,
                    (g, t, out, rw, c, 0),
                    {"CAND": cand, "KP": 0, "KCAND": 1},
                    1,
                )
            elif name == "sample_k50":
                final = (
                    k.sample_final,
                    (g, t, out, rw, c, 50),
                    {"CAND": cand, "KP": room, "KCAND": fused._pow2(c * room)},
                    8,
                )
            else:
                lp = torch.empty(m, device=device)
                tid = torch.empty(m, 5, dtype=torch.int64, device=device)
                tlp = torch.empty(m, 5, device=device)
                final = (
                    k.logprobs_final,
                    (
                        g,
                        ids,
                        lp,
                        tid,
                        tlp,
                        rw,
                        ex.width // 2,
                        f.splits,
                        c,
                        f.columns,
                        args.world,
                        5,
                    ),
                    {"CAND": cand, "NP": room, "NCAND": fused._pow2(c * room)},
                    4,
                )
            fn, a, const, warps = final
            table.setdefault(f"{name} final", []).append(
                _time(
                    lambda fn=fn, a=a, const=const, m=m, warps=warps: f.launch(
                        fn, (m, 1), a, const, warps
                    ),
                    device,
                )
            )
    for name, values in table.items():
        print(f"{name:<28}" + "".join(f"{v:>10.1f}" for v in values))


if __name__ == "__main__":
    main()
