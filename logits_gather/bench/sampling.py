"""python -m logits_gather.bench.sampling: sampling from shards vs from gathered logits.

Methods, per operation (greedy; sample plain, top_k=50, top_p=0.9, min_p=0.05;
logprobs without and with top_n=5) and per M:

* ``shard``: :class:`VocabParallelSampler` on the ``[M, V/W]`` shard (one small exchange).
* ``gather``: our ``LogitsGather`` to ``[M, V]``, then the same operation in torch
  (:mod:`.reference`: argmax, Gumbel-max with the same noise, log_softmax).
* ``stock``: ``all_gather_into_tensor`` + permute to ``[M, V]``, then the same torch ops.

Protocol: methods are interleaved inside every repetition; each repetition
synchronises, barriers, then times a burst of ``--iters`` calls (CUDA events
on GPU, ``perf_counter`` on CPU); the table shows the median over repetitions
of the per-call time, then the max over ranks. ``--graphs`` captures one call
per method in a CUDA graph and times replays (no host launch overhead).

Traps: colocated ranks (several ranks on one GPU) share SMs and memory
bandwidth, and their "peer" copies never touch NVLink, so those timings say
nothing about a real tp run; NCCL refuses colocated ranks, so ``stock`` is
unavailable there. The sampler runs with ``check_values=False`` (no host sync).
Eager timings of small ops measure host launch overhead as much as the GPU.

Targets (issue 11; tp=2, V=151552, bf16, graph replay, M=64) are printed as
met/MISSED from the same run; ``--out DIR`` also writes the table and JSON there.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = (
    "greedy",
    "sample",
    "sample_k50",
    "sample_p90",
    "sample_k50_p90",
    "sample_minp05",
    "logprobs",
    "logprobs_n5",
)
PROG = "python -m logits_gather.bench.sampling"
# (op, graph-replay target at M=64 in us); greedy also needs >= 3x gather at every M >= 16.
TARGETS = (
    ("greedy", 12.0),
    ("sample", 25.0),
    ("sample_k50", 40.0),
    ("sample_p90", 50.0),
    ("logprobs_n5", 25.0),
)
METHODS = ("shard", "gather", "stock")
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
NVLS_OFF = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def _ops(sampler, lg, stock_ok: bool, world: int, shard, temp, seeds, ids):
    """{method: {op: zero-argument callable}} for one M."""
    from ..sampling import reference

    m, n = shard.shape
    staging = torch.empty(world * m, n, dtype=shard.dtype, device=shard.device)

    def stock():
        _all_gather(staging, shard)
        return staging.view(world, m, n).permute(1, 0, 2).reshape(m, world * n)

    def on_full(full):
        return {
            "greedy": lambda: reference.greedy(full()),
            "sample": lambda: reference.sample(full(), temp, seeds),
            "sample_k50": lambda: reference.sample(full(), temp, seeds, 50),
            "sample_p90": lambda: reference.sample(full(), temp, seeds, top_p=0.9),
            "sample_k50_p90": lambda: reference.sample(full(), temp, seeds, 50, 0.9),
            "sample_minp05": lambda: reference.sample(full(), temp, seeds, min_p=0.05),
            "logprobs": lambda: reference.logprobs(full(), ids),
            "logprobs_n5": lambda: reference.logprobs(full(), ids, 5),
        }

    table = {
        "shard": {
            "greedy": lambda: sampler.greedy(shard),
            "sample": lambda: sampler.sample(shard, temp, seeds),
            "sample_k50": lambda: sampler.sample(shard, temp, seeds, 50),
            "sample_p90": lambda: sampler.sample(shard, temp, seeds, top_p=0.9),
            "sample_k50_p90": lambda: sampler.sample(shard, temp, seeds, 50, 0.9),
            "sample_minp05": lambda: sampler.sample(shard, temp, seeds, min_p=0.05),
            "logprobs": lambda: sampler.logprobs(shard, ids),
            "logprobs_n5": lambda: sampler.logprobs(shard, ids, 5),
        },
        "gather": on_full(lambda: lg(shard)),
    }
    if stock_ok:
        table["stock"] = on_full(stock)
    return table


def _check(table, m: int) -> list[str]:
    """The shard path must return the gathered definition's tokens (logprobs: ids equal,
    values within 2e-5 relative): one call of each, before timing."""
    bad = []
    for op, fn in table["shard"].items():
        got, want = fn(), table["gather"][op]()
        if op.startswith("logprobs"):
            err = (got.logprobs - want.logprobs).abs() / (1 + want.logprobs.abs())
            ok = torch.equal(got.top_ids, want.top_ids) and bool((err <= 2e-5).all())
        else:
            ok = torch.equal(got, want)
        if not ok:
            bad.append(f"{op} M={m}")
    return bad


def _burst(fn, iters: int, device: torch.device) -> float:
    """Microseconds per call over a burst of ``iters`` calls."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    if not cuda:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1e6 / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def _graphed(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _worker(rank: int, world: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(NVLS_OFF, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device, colocated = torch.device("cpu"), False
    if args.device == "cuda":
        colocated = torch.cuda.device_count() < world
        device = torch.device("cuda", 0 if colocated else rank)
        torch.cuda.set_device(device)
        if colocated:
            os.environ["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
    backend = "nccl" if device.type == "cuda" and not colocated else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)
    from logits_gather import LogitsGather

    from ..sampling.sampler import VocabParallelSampler

    n, cap = args.vocab // world, max(args.rows)
    sampler = VocabParallelSampler(n, cap, device=device, check_values=False)
    lg = LogitsGather(n, cap, device=device, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(1234 + rank)
    results = {}
    mismatches: list[str] = []
    bar = _progress(rank, len(args.rows) * (1 + args.reps))
    for m in args.rows:
        shard = (torch.randn(m, n, generator=gen) * 3).to(torch.bfloat16).to(device)
        temp = torch.full((m,), 0.8, device=device)
        seeds = torch.arange(m, device=device)
        ids = torch.randint(0, n * world, (m,), generator=torch.Generator().manual_seed(m))
        table = _ops(sampler, lg, not colocated, world, shard, temp, seeds, ids.to(device))
        for fns in table.values():  # warm up: builds exchanges, compiles kernels
            for fn in fns.values():
                fn()
        mismatches += _check(table, m)
        bar.update(1)
        if args.graphs and device.type == "cuda":
            table = {k: {op: _graphed(fn) for op, fn in fns.items()} for k, fns in table.items()}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.reps):
            for op in OPS:
                for method, fns in table.items():
                    times.setdefault((op, method), []).append(_burst(fns[op], args.iters, device))
            bar.update(1)
        results[m] = {f"{op}/{method}": statistics.median(v) for (op, method), v in times.items()}
    bar.close()
    everyone: list = [None] * world
    results["mismatches"] = mismatches
    dist.all_gather_object(everyone, results)
    if rank == 0:
        _report(args, world, device, colocated, sampler.backend, lg.backend, everyone)
    dist.barrier()
    if device.type == "cuda":
        # The 2-H200 run printed its table and then did not exit within 80 s: skip the
        # teardown of captured graphs (NCCL inside), symmetric memory and the group.
        torch.cuda.synchronize()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    # The objects hold the group: freed after its destruction (at return), they made
    # gloo abort at exit ("terminate called without an active exception") in about one
    # CPU run of ten. Why is not established; freeing them first avoided it.
    del sampler, lg, table
    gc.collect()
    dist.destroy_process_group()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(rank: int, total: int):
    """A tqdm bar on rank 0 (stderr); nothing elsewhere or without tqdm."""
    if rank != 0:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="sampling bench", unit="step", file=sys.stderr)


def _verdicts(rows: dict, graphs: bool, world: int, vocab: int) -> list[str]:
    """met/MISSED per target, from this run's numbers."""
    out = []
    setup = world == 2 and vocab == 151552
    note = "" if setup else f" (targets are for tp=2, V=151552; this is tp={world}, V={vocab})"
    if graphs and 64 in rows:
        for op, limit in TARGETS:
            us = rows[64].get(f"{op}/shard")
            if us is not None:
                out.append(
                    f"target {op} <= {limit:g} us at M=64 (graph replay): "
                    f"{us:.1f} us {'met' if us <= limit else 'MISSED'}{note}"
                )
        big = [m for m in rows if m >= 16]
        if big:
            worst = min(rows[m]["greedy/gather"] / rows[m]["greedy/shard"] for m in big)
            out.append(
                f"target greedy >= 3x gather + argmax at every M >= 16: worst "
                f"{worst:.2f}x {'met' if worst >= 3 else 'MISSED'}{note}"
            )
    elif not graphs:
        for op in OPS:
            ratios = {m: rows[m][f"{op}/gather"] / rows[m][f"{op}/shard"] for m in rows}
            worst = min(ratios, key=ratios.get)
            out.append(
                f"target eager {op}: shard faster than gather at every M: worst "
                f"{ratios[worst]:.2f}x at M={worst} "
                f"{'met' if ratios[worst] > 1 else 'MISSED'}{note}"
            )
    return out


def _report(args, world, device, colocated, sampler_backend, lg_backend, everyone) -> None:
    rows = {m: {k: max(r[m][k] for r in everyone) for k in everyone[0][m]} for m in args.rows}
    bad = sorted({f"rank {i}: {b}" for i, r in enumerate(everyone) for b in r["mismatches"]})
    graphs = args.graphs and device.type == "cuda"
    where = (
        f"{world} ranks on {device.type}"
        + (" (colocated on one GPU)" if colocated else "")
        + f", V={args.vocab}, bf16, exchange={sampler_backend}, gather={lg_backend}"
        + (", CUDA graphs" if graphs else ", eager")
    )
    lines = [where]
    if colocated:
        lines.append(
            "NOTE: colocated ranks share one GPU: these timings say nothing about "
            "NVLink; stock (NCCL) is unavailable with colocated ranks."
        )
    lines.append(
        f"{'op':<14}{'M':>5}"
        + "".join(f"{m + ' us':>12}" for m in METHODS)
        + f"{'x gather':>10}{'x stock':>10}"
    )
    for op in OPS:
        for m in args.rows:
            t = {meth: rows[m].get(f"{op}/{meth}") for meth in METHODS}
            cells = "".join(f"{v:>12.1f}" if v else f"{'n/a':>12}" for v in t.values())
            ratios = "".join(
                f"{t[b] / t['shard']:>9.1f}x" if t[b] else f"{'n/a':>10}"
                for b in ("gather", "stock")
            )
            lines.append(f"{op:<14}{m:>5}{cells}{ratios}")
    lines.append(
        "check shard == gathered definition: "
        + ("ok (every op and M)" if not bad else "MISMATCH " + "; ".join(bad))
    )
    if device.type == "cuda":
        lines += _verdicts(rows, graphs, world, args.vocab)
    text = "\n".join(lines)
    print(text)
    record = {
        "setup": where,
        "world": world,
        "graphs": graphs,
        "us": rows,
        "targets": [v for v in lines if v.startswith("target")],
    }
    paths = [args.json] if args.json else []
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stem = os.path.join(args.out, f"sampling_tp{world}_{'graphs' if graphs else 'eager'}")
        with open(stem + ".txt", "w") as f:
            f.write(text + "\n")
        paths.append(stem + ".json")
        print(f"wrote {stem}.txt")
    for path in paths:
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {path}")


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be a positive integer, got {text!r}"
            ) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def _rows(text: str) -> list[int]:
    try:
        rows = [int(m) for m in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--rows must be comma-separated positive integers, got {text!r}"
        ) from None
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError(f"--rows values must be >= 1, got {text!r}")
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument(
        "--world-size",
        type=_positive("--world-size"),
        default=None,
        help="ranks (default: GPU count if > 1, else 2)",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--rows",
        type=_rows,
        default=[1, 4, 16, 64, 256],
        help="comma-separated M values (default 1,4,16,64,256)",
    )
    p.add_argument("--vocab", type=_positive("--vocab"), default=151552)
    p.add_argument(
        "--iters", type=_positive("--iters"), default=None, help="calls per burst (GPU 50, CPU 2)"
    )
    p.add_argument(
        "--reps", type=_positive("--reps"), default=None, help="bursts per method (GPU 15, CPU 3)"
    )
    p.add_argument("--graphs", action="store_true", help="time CUDA graph replays (GPU only)")
    p.add_argument("--json", default=None, help="also write the table here")
    p.add_argument("--out", default=None, help="directory for the table (.txt) and .json")
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU is available here (use --device cpu)")
    if args.graphs and not gpu:
        p.error("--graphs needs --device cuda")
    gpus = torch.cuda.device_count() if gpu else 0
    world = args.world_size or (gpus if gpus > 1 else 2)
    args.iters = args.iters or (50 if gpu else 2)
    args.reps = args.reps or (15 if gpu else 3)
    if args.vocab % world:
        p.error(f"--vocab {args.vocab} is not divisible by --world-size {world}")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if gpu and gpus < world:  # ranks share a GPU: kernels loaded at start (plan.rank_env)
        os.environ["CUDA_MODULE_LOADING"] = "EAGER"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_worker, args=(world, args, port), nprocs=world, start_method="spawn")


if __name__ == "__main__":
    main()
