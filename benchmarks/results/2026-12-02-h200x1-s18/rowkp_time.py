"""Per-row top_k with top_p through the public API, world size 1, one GPU: eager µs per
call (synchronised, median of 40) and graph replay µs per call (20 calls per graph, median
of 10 replays), for the code on PYTHONPATH. Also scalar top_k=50+top_p and top_p alone.
(Run as ``.s18/rowkp_time.py``; reformatted for ruff here, the same statements.)"""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29557")
dist.init_process_group("gloo", rank=0, world_size=1)
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
import logits_gather  # noqa: E402
from logits_gather.sampling.sampler import VocabParallelSampler  # noqa: E402

label = sys.argv[1]
print(label, "library at", os.path.dirname(logits_gather.__file__))
n = 75776
s = VocabParallelSampler(n, 256, device=dev, check_values=False)


def ops(m):
    g = torch.Generator(device=dev)
    g.manual_seed(m)
    x = (torch.randn(m, n, device=dev, generator=g) * 3).to(torch.bfloat16)
    t = torch.full((m,), 0.8, device=dev)
    seed = torch.arange(m, device=dev)
    pr = torch.tensor([(0.9, 1.0, 0.5, 0.7)[i % 4] for i in range(m)], device=dev)
    koff = torch.tensor([(0, 50, 20, s.vocab, 1)[i % 5] for i in range(m)], device=dev)
    return {
        "top_k [M], top_p [M]": lambda: s.sample(x, t, seed, top_k=koff, top_p=pr),
        "top_k=50, top_p=0.9": lambda: s.sample(x, t, seed, top_k=50, top_p=0.9),
        "top_p [M]": lambda: s.sample(x, t, seed, top_p=pr),
    }


def eager(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(40):
        a = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - a)
    return statistics.median(ts) * 1e6


def graph(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(12):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / 20)
    return statistics.median(ts[2:])


for m in (1, 16, 64, 256):
    for name, fn in ops(m).items():
        e = eager(fn)
        flags = s._fused.topp_flags.tolist() if s._fused.topp_flags is not None else None
        try:
            gr = f"{graph(fn):8.1f}"
        except Exception as exc:  # noqa: BLE001
            gr = f"graph failed: {type(exc).__name__}: {str(exc)[:200]}"
        print(f"{label} M={m:<4} {name:<22} eager {e:8.1f} us  graph {gr} us  "
              f"last topp flags {flags}", flush=True)  # fmt: skip
