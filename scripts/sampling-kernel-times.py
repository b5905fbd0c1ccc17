"""Where the fused sampling time goes, on one GPU, one process, no peers.

``python scripts/sampling-kernel-times.py [--columns 75776] [--rows 1,16,64,256] [--kernels]``

A one-rank sampler over ``columns`` columns (the per-rank work of tp=2 at
V=151552) with a local mailbox. For each operation it prints microseconds per
launch under CUDA-graph replay of: the local kernel alone (it may be replayed:
it does not advance epochs), and the whole operation (local and final kernels;
the final's cost is the difference), and greedy, sample, logprobs and min-p again as
one launch (:mod:`logits_gather.sampling.kernels.waiters`). ``--kernels`` also prints
each whole operation's
kernels with their GPU times (torch.profiler). No NVLink: add the exchange's latency.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from logits_gather.sampling.fused import rounds
from logits_gather.sampling.kernels import topk, writers
from logits_gather.sampling.kernels import topp as N
from scripts.support.emulated import Ranks
from scripts.support.replay import graph_us as _time


def _kernels(fn, reps: int = 30) -> list[tuple[str, float]]:
    """``(kernel, median GPU us)`` in launch order, from torch.profiler over graph replays
    of ``fn``: where a whole operation's time goes (its total is :func:`_time`)."""
    from torch.autograd import DeviceType

    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            graph.replay()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    per = len(events) // reps
    out = []
    for i in range(per):
        us = [e.time_range.elapsed_us() for e in events[i::per]]
        out.append((events[i].name.split("(")[0][:24], statistics.median(us)))
    return out


def _times(f, m: int, columns: int, device: torch.device) -> dict[str, float]:
    out: dict[str, float] = {}
    x = (torch.randn(m, columns, device=device) * 3).to(torch.bfloat16)
    t = torch.full((m,), 0.8, device=device)
    seed = (torch.arange(m, device=device), torch.zeros(m, dtype=torch.int64, device=device))
    ids = torch.randint(0, columns, (m,), device=device)
    mp = torch.full((m,), 0.05, device=device)
    p90 = torch.full((m,), 0.9, dtype=torch.float64, device=device)
    gkey = f.greedy(x, key=True)
    tok, _ = f.sample_topp(x, t, seed, p90, None)
    out["top_p=0.9 rows to round 2"] = float((f.spilled != 0x7FFFFFFF).sum())
    out["top_p=0.9 rows undecided"] = float((tok < 0).sum())
    nucleus = {"SLOTS": f.topp_slots, "MINP": False, "ROWK": False}
    locals_ = {
        "greedy": (writers.greedy_local, (), "greedy", 0, (), {"XBITS": 16, "PAIRS": True}),
        "sample": (writers.sample_local, (t, seed), "sample", 0, (), {}),
        "topk_probe G=8": (topk.topk_probe, (), "probe", 8, (), {"G": 8, "PAIRS": True}),
        "logprobs": (writers.logprobs_local, (ids,), "logprobs", 0, (0,), {"NP": 0, "XBITS": 16}),
        "logprobs_n5": (
            writers.logprobs_local,
            (ids,),
            "logprobs",
            8,
            (5,),
            {"NP": 8, "XBITS": 16},
        ),
    }
    lam = torch.empty(m, dtype=torch.int32, device=device)
    topp_flags = torch.empty(2, dtype=torch.bool, device=device)  # need, more
    head = (t, seed, p90, p90, gkey, lam, topp_flags, t)  # no per-row top_k: t stands in
    locals_["nucleus (top_p)"] = (N.nucleus_local, head, "topp", 0, (0,), nucleus)
    for name, (fn, head, op, room, tail, consts) in locals_.items():
        out[f"{name} local"] = _time(
            lambda: f.local(fn, x, head, op, room, tail, consts)  # noqa: B023 - run at once
        )

    def topk_round1(k: int = 50) -> torch.Tensor:  # as Fused.sample: the probe and the reduce
        plan = f.wide.topk(k)
        probe = {"G": plan.g, "PAIRS": True}  # x is bfloat16, its rows 4-byte aligned
        mb = f.local(topk.topk_probe, x, (), "probe", plan.g, (), probe, plan.probe)
        gbest, low = f.empty(x), f.empty(x, torch.int32)
        consts = {"G": plan.g, "ROWK": False, "BITS": 16}  # x is bfloat16
        f.final(topk.topk_reduce, m, mb, (t, gbest, low, f.wide.c, k), consts, plan.reduce)
        return low

    def topk_round2(k: int = 50) -> None:  # round 2's writer alone (after round 1 above)
        plan = f.wide.topk(k)
        f.local(topk.topk_local, x, (t, low_k50, flags), "sample_k", plan.kp, (), {"KP": plan.kp})

    low_k50 = topk_round1()
    flags = torch.zeros(m * f.wide.splits, dtype=torch.int32, device=device)
    out["topk_local k=50 local"] = _time(topk_round2)

    whole = {
        "greedy": lambda: f.greedy(x),
        "sample_k50 round 1": topk_round1,
        "sample": lambda: f.sample(x, t, seed),
        "sample_k50": lambda: f.sample_topk(x, t, seed, 50, None, None),
        "sample_k50_p90": lambda: f.sample_topk(x, t, seed, 50, p90, None),
        "sample_k50_p90_minp": lambda: f.sample_topk(x, t, seed, 50, p90, mp),
        "sample_minp": lambda: f.sample_minp(x, t, seed, mp),
        "sample_p90 (fused)": lambda: f.sample_topp(x, t, seed, p90, None),
        "sample_p90 round 1": lambda: f.topp_rounds(x, t, seed, p90, None),
        "logprobs": lambda: f.logprobs(x, ids, 0),
        "logprobs_n5": lambda: f.logprobs(x, ids, 5),
    }
    for name, fn in whole.items():
        out[f"{name} all"] = _time(fn)
        if KERNELS:
            parts = " ".join(f"{k}={us:.1f}" for k, us in _kernels(fn))
            print(f"M={m} {name} ({out[f'{name} all']:.1f} us): {parts}", flush=True)
    f.single_rows, f.single_in_graphs = m, True  # one launch each (kernels/waiters.py)
    ones = ("greedy", "sample", "logprobs", "logprobs_n5", "sample_minp", "sample_k50")
    for name in ones:
        out[f"{name} one launch"] = _time(whole[name])
    f.single_rows = 0
    f.single_in_graphs = False
    return out


KERNELS = False  # --kernels


def main() -> None:
    p = argparse.ArgumentParser(prog="python scripts/sampling-kernel-times.py")
    p.add_argument("--columns", type=int, default=75776)
    p.add_argument("--rows", default="1,16,64,256")
    p.add_argument(
        "--configs",
        default="",
        help="comma-separated BLOCKxWARPS launch geometries, each given to every operation, "
        "timed in this order in one process (default: the sampler's own geometries)",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="also print each whole operation's kernels with their GPU time (torch.profiler)",
    )
    args = p.parse_args()
    global KERNELS
    KERNELS = args.kernels
    device = torch.device("cuda")
    rows = [int(m) for m in args.rows.split(",")]
    warm = torch.randn(4096, 4096, device=device)
    for _ in range(50):  # a busy GPU first, so the first configuration is not timed cold
        warm @ warm
    for config in args.configs.split(",") if args.configs else [None]:
        if config is not None:
            rounds.WIDE = rounds.NARROW = tuple(int(v) for v in config.split("x"))
        f = Ranks(1, args.columns, max(rows), device, wait_ctas=0, single_rows=0).fused[0]
        print(f"columns={args.columns} wide={f.wide} narrow={f.narrow} (us, graph replay)")
        print(f"{'operation':<24}" + "".join(f"{'M=' + str(m):>10}" for m in rows))
        table: dict[str, list[float]] = {}
        for m in rows:
            for name, us in _times(f, m, args.columns, device).items():
                table.setdefault(name, []).append(us)
        for name, values in table.items():
            print(f"{name:<24}" + "".join(f"{v:>10.1f}" for v in values))


if __name__ == "__main__":
    main()
