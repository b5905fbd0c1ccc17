"""The CUDA graph IF node of :mod:`logits_gather.sampling.fused.conditional` (one GPU)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu import needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]


def test_if_node_runs_its_body_only_when_the_flag_is_set() -> None:
    from logits_gather.sampling.fused.conditional import Conditional

    dev = torch.device("cuda", 0)
    assert Conditional.problem(dev) is None, Conditional.problem(dev)
    cond = Conditional(dev)
    x = torch.empty(1000, device=dev)
    flag = torch.empty(1, dtype=torch.bool, device=dev)
    out = torch.empty_like(x)

    def body() -> None:  # allocates inside the child graph: a temporary, then a copy
        out.copy_(torch.sort(x).values * 2)

    stream = torch.cuda.Stream(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out.copy_(x)
        cond.capture_if(flag, body)
        out.add_(1)
    gen = torch.Generator(device=dev).manual_seed(7)
    for i in range(6):
        x.copy_(torch.randn(1000, device=dev, generator=gen))
        flag.fill_(i % 3 == 1)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = (torch.sort(x).values * 2 if i % 3 == 1 else x) + 1
        assert torch.equal(out, want), f"replay {i}, flag {i % 3 == 1}"


def test_nested_if_nodes_follow_both_flags() -> None:
    """An IF node captured inside another's body (top-p's round 2, then the fallback's IF
    node): each body runs iff its own flag is set and every enclosing flag too."""
    from logits_gather.sampling.fused.conditional import Conditional

    dev = torch.device("cuda", 0)
    cond = Conditional(dev)
    x = torch.empty(777, device=dev)
    outer = torch.empty(1, dtype=torch.bool, device=dev)
    inner = torch.empty(1, dtype=torch.bool, device=dev)
    out = torch.empty_like(x)

    def second() -> None:
        out.copy_(torch.sort(out).values * 3)  # a temporary inside the inner child graph

    def first() -> None:
        out.add_(torch.cumsum(x, 0))
        cond.capture_if(inner, second)

    stream = torch.cuda.Stream(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out.copy_(x)
        cond.capture_if(outer, first)
        out.sub_(1)
    gen = torch.Generator(device=dev).manual_seed(5)
    for i, (a, b) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1), (1, 1), (0, 1), (1, 0)]):
        x.copy_(torch.randn(777, device=dev, generator=gen))
        outer.fill_(bool(a))
        inner.fill_(bool(b))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = x.clone()
        if a:
            want = want + torch.cumsum(x, 0)
            if b:
                want = torch.sort(want).values * 3
        assert torch.equal(out, want - 1), f"replay {i}: outer {a}, inner {b}"
