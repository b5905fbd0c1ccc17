"""Microseconds per call of a function under CUDA-graph replay: the scripts' one timer."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def graph_us(fn: Callable[[], object], iters: int = 200, reps: int = 7) -> float:
    """Median over ``reps`` bursts of ``iters`` replays of a graph of one ``fn()`` call,
    after one eager call (which builds what the call needs). Without CUDA (a dry run of
    a script under the interpreter), one eager call and 0.0."""
    fn()
    if not torch.cuda.is_available():
        return 0.0
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
