"""GPU kernels per eager call of every sampling operation, one GPU, world size 1.

``PYTHONPATH=. python scripts/sampling-launch-count.py [--rows 4,128]`` calls each
operation of :class:`~logits_gather.sampling.sampler.VocabParallelSampler` through the
public API (argument checks and glue included) under ``torch.profiler`` and prints the
kernels one call launched, by name, at each M: one launch per round
(:mod:`logits_gather.sampling.single`), by program id up to ``ticket_rows`` rows and by
ticket above (world size 1 has a GPU of its own). Memory copies and host syncs
are listed apart (top-p reads its flags with one sync per eager call).
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile


def _kernels(fn) -> tuple[Counter, Counter]:
    fn()  # compiled, loaded and bound before the counted call
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels, other = Counter(), Counter()
    for e in prof.events():
        kind = str(getattr(e, "device_type", ""))
        if "CUDA" not in kind:
            if e.name in ("cudaStreamSynchronize", "cudaMemcpyAsync", "cudaDeviceSynchronize"):
                other[e.name] += 1
            continue
        name = e.name.split("(")[0][:60]
        (other if "Memcpy" in name or "Memset" in name else kernels)[name] += 1
    other["cudaDeviceSynchronize"] -= 1  # the profiler's own
    return kernels, +other


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="4,128")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29556")
    dist.init_process_group("gloo", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    from logits_gather.sampling.sampler import VocabParallelSampler

    n = 75776
    s = VocabParallelSampler(n, 256, device=dev, check_values=False)
    f = s._fused
    print(f"fused path: {f is not None}, one launch up to M={f.single_rows}, "
          f"by ticket above M={f.ticket_rows}")  # fmt: skip
    for m in (int(r) for r in args.rows.split(",")):
        f = s._fused
        how = "two" if m > f.single_rows else "one, by ticket" if m > f.ticket_rows else "one"
        print(f"\n=== M={m} ({how} launch(es) per round)")
        for name, fn in _ops(s, m, n, dev).items():
            kernels, other = _kernels(fn)
            listed = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in kernels.items())
            extra = f"; also {dict(other)}" if other else ""
            print(f"{name:<28}{sum(kernels.values()):3d} kernels: {listed}{extra}")


def _ops(s, m: int, n: int, dev: torch.device) -> dict:
    x = (torch.randn(m, n, device=dev) * 3).to(torch.bfloat16)
    t = torch.full((m,), 0.8, device=dev)
    seed = torch.arange(m, device=dev)
    ids = torch.randint(0, n, (m,), device=dev)
    pr = torch.full((m,), 0.9, device=dev)
    kr = torch.full((m,), 50, device=dev, dtype=torch.int64)
    pr64 = pr.double()
    koff = torch.tensor([(0, 50, s.vocab)[i % 3] for i in range(m)], device=dev)  # 0, V: off
    mpr = torch.full((m,), 0.05, device=dev)
    return {
        "greedy": lambda: s.greedy(x),
        "sample": lambda: s.sample(x, t, seed),
        "sample top_k=50": lambda: s.sample(x, t, seed, top_k=50),
        "sample top_p=0.9": lambda: s.sample(x, t, seed, top_p=0.9),
        "sample min_p=0.05": lambda: s.sample(x, t, seed, min_p=0.05),
        "sample top_k=50 top_p=0.9": lambda: s.sample(x, t, seed, top_k=50, top_p=0.9),
        "sample top_p [M] float32": lambda: s.sample(x, t, seed, top_p=pr),
        "sample top_p [M] float64": lambda: s.sample(x, t, seed, top_p=pr64),
        "sample top_k [M] tensor": lambda: s.sample(x, t, seed, top_k=kr),
        "top_k [M] with off rows": lambda: s.sample(x, t, seed, top_k=koff),
        "top_k [M], min_p [M]": lambda: s.sample(x, t, seed, top_k=koff, min_p=mpr),
        "min_p [M]": lambda: s.sample(x, t, seed, min_p=mpr),
        "top_p=0.9, min_p [M]": lambda: s.sample(x, t, seed, top_p=0.9, min_p=mpr),
        "sample top_k=300": lambda: s.sample(x, t, seed, top_k=300),
        "top_k=300, top_p=0.9": lambda: s.sample(x, t, seed, top_k=300, top_p=0.9),
        "top_k [M], top_p [M]": lambda: s.sample(x, t, seed, top_k=koff, top_p=pr),
        "logprobs": lambda: s.logprobs(x, ids),
        "logprobs top_n=5": lambda: s.logprobs(x, ids, 5),
    }


if __name__ == "__main__":
    main()
