"""Helpers of the session 18 and 19 scripts (``rowkp_time.py``, ``graph_diag.py``,
session 19's ``ops_time.py``), which each held them inline when they ran: eager µs per call
(synchronised, median of 40) and graph replay µs per call (20 calls per graph, median of
10 replays); the world-size-1 setup they shared."""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def start(port):
    """``(label, device, columns, sampler)``: world size 1 on cuda:0 (gloo), the label from
    argv (printed with the library's path; None without one), a sampler of 75776 columns
    from the ``logits_gather`` on PYTHONPATH."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    import logits_gather
    from logits_gather.sampling.sampler import VocabParallelSampler

    label = sys.argv[1] if len(sys.argv) > 1 else None
    if label is not None:
        print(label, "library at", os.path.dirname(logits_gather.__file__))
    n = 75776
    return label, dev, n, VocabParallelSampler(n, 256, device=dev, check_values=False)


def inputs(s, dev, n, m):
    """``(x, t, seed, koff)`` at ``M = m``: ``randn * 3`` bf16 rows (seeded by ``m``),
    T = 0.8, seeds 0..m-1, and a per-row ``top_k`` of 0, 50, 20, V, 1 in turn."""
    g = torch.Generator(device=dev)
    g.manual_seed(m)
    x = (torch.randn(m, n, device=dev, generator=g) * 3).to(torch.bfloat16)
    t = torch.full((m,), 0.8, device=dev)
    seed = torch.arange(m, device=dev)
    koff = torch.tensor([(0, 50, 20, s.vocab, 1)[i % 5] for i in range(m)], device=dev)
    return x, t, seed, koff


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


def report(label, s, ops):
    """Eager and graph µs of each of ``ops(m)``'s calls (sampler ``s``), one line each."""
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
