"""CUDA-graph capture of LogitsGather calls: every replay exact, with eager calls
interleaved, several graphs sharing one object, and a delayed rank."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from scripts.support.placement import COLOCATE_ENV, placement_env, rank_device
from tests.support.gpu import all_ranks_ok, assert_bits, delay_random_rank, placements, random_full

pytestmark = pytest.mark.gpu
COLUMNS, CAPACITY = 151552 // 8, 16


def _capture(g: LogitsGather, inputs: list[torch.Tensor], outputs: list[torch.Tensor]):
    """One graph: each gather followed by a consumer kernel copying its result."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x, y in zip(inputs, outputs, strict=True):
            y.copy_(g(x))
    return graph


def _replays(rank: int, world: int, placement: str, replays: int) -> None:
    device = rank_device(rank, placement)
    dtype = torch.bfloat16
    g = LogitsGather(
        columns=COLUMNS,
        capacity=CAPACITY,
        device=device,
        dtype=dtype,
        on_timeout="raise",
        timeout_s=60.0,
    )
    assert g.backend == "symm_mem", g.backend
    rng = random.Random(7)
    gen = torch.Generator(device=device)
    graphs = []
    for count in (1, 2, 3):  # odd counts included; all three graphs share g
        ms = [rng.randint(1, CAPACITY) for _ in range(count)]
        inputs = [torch.empty(m, COLUMNS, dtype=dtype, device=device) for m in ms]
        outputs = [torch.empty(m, world * COLUMNS, dtype=dtype, device=device) for m in ms]
        graphs.append((_capture(g, inputs, outputs), inputs, outputs))
    torch.cuda.synchronize()
    dist.barrier()
    ok, message = True, ""
    try:
        for step in range(replays):
            graph, inputs, outputs = graphs[rng.randrange(len(graphs))]
            expected = []
            for i, x in enumerate(inputs):
                gen.manual_seed(step * 10 + i)
                full = random_full(gen, x.shape[0], world * COLUMNS, dtype, device)
                x.copy_(full[:, rank * COLUMNS : (rank + 1) * COLUMNS])
                expected.append(full)
            for y in outputs:
                y.fill_(-3.0)  # poison the consumers' outputs
            delay_random_rank(rng, rank, world)
            graph.replay()
            for i, (y, full) in enumerate(zip(outputs, expected, strict=True)):
                assert_bits(y, full, f"replay {step} gather {i}/{len(inputs)}")
            if rng.random() < 0.5:  # eager calls between replays
                m = rng.randint(1, CAPACITY)
                gen.manual_seed(10**6 + step)
                full = random_full(gen, m, world * COLUMNS, dtype, device)
                delay_random_rank(rng, rank, world)
                out = g(full[:, rank * COLUMNS : (rank + 1) * COLUMNS].contiguous())
                assert_bits(out, full, f"eager call after replay {step}")
        g.check()
    except AssertionError as exc:
        ok, message = False, str(exc)
    all_ranks_ok(ok, message)


@pytest.mark.parametrize("world,placement", placements())
def test_graph_replays_exact(world: int, placement: str) -> None:
    env = placement_env(placement)
    run_ranks(_replays, world, placement, 500, env=env, timeout=900)


def _no_graph_slots(rank: int, world: int) -> None:
    device = rank_device(rank, "one-gpu")
    g = LogitsGather(columns=256, capacity=4, device=device, graphs=False)
    x = torch.ones(2, 256, dtype=torch.bfloat16, device=device)
    g(x)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="graphs=False"):
        with torch.cuda.graph(graph):
            g(x)


def test_capture_without_graph_slots_is_a_clear_error() -> None:
    run_ranks(_no_graph_slots, 2, env=COLOCATE_ENV, timeout=300)
