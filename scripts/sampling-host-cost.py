"""Host cost per eager call of the fused sampling operations, one GPU, world size 1.

``PYTHONPATH=. python scripts/sampling-host-cost.py [--profile]`` prints microseconds
per call over bursts of back-to-back calls (no sync inside a burst, M=4, so the GPU
keeps up and the host is what is timed), then greedy, sample, logprobs, top-k and min-p
again as two launches per round instead of one (:mod:`logits_gather.sampling.single`);
``--profile`` adds cProfile's top entries for greedy and logprobs. Machines vary
between starts: compare within one run.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

import torch
import torch.distributed as dist


def _time(fn, reps: int = 9, burst: int = 200) -> float:
    for _ in range(20):
        fn()
    runs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(burst):
            fn()
        runs.append((time.perf_counter() - t) / burst * 1e6)
    torch.cuda.synchronize()
    return sorted(runs)[reps // 2]


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29555")
    dist.init_process_group("gloo", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    from logits_gather.sampling.sampler import VocabParallelSampler

    n, m = 75776, 4
    s = VocabParallelSampler(n, 64, device=dev, check_values=False)
    x = (torch.randn(m, n, device=dev) * 3).to(torch.bfloat16)
    t = torch.full((m,), 0.8, device=dev)
    seed = torch.arange(m, device=dev)
    ids = torch.randint(0, n, (m,), device=dev)
    ops = {
        "greedy": lambda: s.greedy(x),
        "sample": lambda: s.sample(x, t, seed),
        "sample top_k=50": lambda: s.sample(x, t, seed, top_k=50),
        "sample top_p=0.9": lambda: s.sample(x, t, seed, top_p=0.9),
        "sample min_p=0.05": lambda: s.sample(x, t, seed, min_p=0.05),
        "logprobs": lambda: s.logprobs(x, ids),
        "logprobs top_n=5": lambda: s.logprobs(x, ids, 5),
        "torch.argmax (for scale)": lambda: x.argmax(1),
        "torch.empty (for scale)": lambda: torch.empty(m, dtype=torch.int64, device=dev),
    }
    print(f"fused path: {s._fused is not None}, one launch up to M={s._fused.single_rows}")
    for name, fn in ops.items():
        print(f"{name:<26}{_time(fn):8.2f} us per call")
    one = s._fused.single_rows
    s._fused.single_rows = 0  # the same calls as two launches (single.py's A/B)
    for name in ("greedy", "sample", "logprobs", "logprobs top_n=5", "sample top_k=50",
                 "sample min_p=0.05"):  # fmt: skip
        print(f"{name + ', two launches':<26}{_time(ops[name]):8.2f} us per call")
    s._fused.single_rows = one
    if "--profile" in sys.argv:
        for name in ("greedy", "logprobs"):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(500):
                ops[name]()
            prof.disable()
            torch.cuda.synchronize()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
            print(f"=== cProfile, {name}, 500 calls\n{out.getvalue()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
