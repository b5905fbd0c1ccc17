"""LogitsGather.linear on real GPUs: the fused head kernel, exact and within GEMM tolerance.

- Every column block of every rank's result equals, bit for bit, the tile its owner
  computes with the same kernel at world size 1 (so every rank's result is the same).
- Within bf16 GEMM tolerance of an fp32 reference, no worse than cuBLAS's own error.
- Random M, a randomly delayed rank, poisoned slots, plain gathers interleaved (one
  protocol, shared slots and epochs), the next-but-one lifetime, and an odd number of
  calls captured in a CUDA graph and replayed with fresh inputs.
- ``fused=False`` is ``F.linear`` + the gather, bit for bit.
Run with ``bash scripts/gpu-tests.sh tests/head/test_fused.py`` (ranks sharing the GPU
need MPS).
"""

from __future__ import annotations

import os
import random

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from scripts.support.placement import COLOCATE_ENV, rank_device
from tests.support.gpu import all_ranks_ok, assert_bits, delay_random_rank, two_rank_placement

pytestmark = pytest.mark.gpu
POISON = -7.0
CALLS = int(os.environ.get("LOGITS_GATHER_HEAD_CALLS", "1000"))


def _local(dtype: torch.dtype, columns: int, capacity: int, device: torch.device):
    """The same kernel at world size 1 (no peers): ``fn(hidden, weight, tile)``."""
    from logits_gather.head.fused import FusedHead, LocalSlots

    head = FusedHead(
        LocalSlots(capacity, columns, dtype, device),
        capacity=capacity,
        dtype=dtype,
        device=device,
        graphs=False,
        agree=lambda failure: [failure],
    )
    return head


def _expected(head, hidden, weights, tile) -> torch.Tensor:
    head.compile(hidden.shape[1], tile)
    return torch.cat([head(hidden, w, tile).clone() for w in weights], dim=1)


def _cublas(hidden: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    """What ``F.linear`` + the gather gives: each rank's own ``F.linear``, side by side."""
    return torch.cat([F.linear(hidden, w.contiguous()) for w in weights], dim=1)


def _tolerance(out: torch.Tensor, hidden: torch.Tensor, full_w: torch.Tensor) -> str:
    ref = hidden.float() @ full_w.float().T
    ours = float((out.float() - ref).norm() / ref.norm())
    cublas = float((F.linear(hidden, full_w).float() - ref).norm() / ref.norm())
    if not (ours <= 2 * cublas + 1e-4 and ours < 1e-2):
        return f"relative error {ours:.2e} against cuBLAS's {cublas:.2e}"
    return ""


def _soak(rank: int, world: int, placement: str, dtype: torch.dtype, h: int, columns: int):
    from logits_gather.head.table import pick

    device = rank_device(rank, placement)
    capacity = 64
    g = LogitsGather(columns, capacity, device=device, dtype=dtype, on_timeout="raise")
    gen = torch.Generator(device=device).manual_seed(5)
    full_w = (torch.randn(world * columns, h, device=device, generator=gen) * 0.05).to(dtype)
    weights = [full_w[r * columns : (r + 1) * columns] for r in range(world)]
    weight = weights[rank].contiguous()
    local = _local(dtype, columns, capacity, device)
    slots = g._impl._buffers.slots if world > 1 else None
    rng = random.Random(11)
    ok, message, previous = True, "", None
    try:
        for call in range(CALLS):
            m = rng.randint(1, capacity) if call else capacity
            gen.manual_seed(1000 + call)
            hidden = torch.randn(m, h, device=device, generator=gen).to(dtype)
            if call % 7 == 6:  # a plain gather between head calls: shared slots and epochs
                full = torch.randn(m, world * columns, device=device, generator=gen).to(dtype)
                assert_bits(
                    g(full[:, rank * columns : (rank + 1) * columns].contiguous()), full, "gather"
                )
                previous = None
                continue
            if slots is not None:
                slots[(g._impl.slots.eager + 1) % 3].fill_(POISON)
            delay_random_rank(rng, rank, world)
            fused = None if call % 5 else True
            out = g.linear(hidden, weight, fused=fused)
            tile = pick(m, h, columns, forced=True)
            expected = _expected(local, hidden, weights, tile)
            what = f"{dtype} H={h} columns={columns} call {call} M={m}"
            if fused or pick(m, h, columns) is not None:
                assert_bits(out, expected, what)
            else:  # the table chose cuBLAS
                assert_bits(out, _cublas(hidden, weights), what + " (cuBLAS route)")
            if call < 3:
                why = _tolerance(out, hidden, full_w)
                assert not why, f"{what}: {why}"
            if previous is not None:
                assert_bits(previous[0], previous[1], f"{what}: result k-1 after call k")
            previous = (out, out.clone())
        # fused=False: F.linear + the gather
        hidden = torch.randn(5, h, device=device, generator=gen).to(dtype)
        assert_bits(g.linear(hidden, weight, fused=False), _cublas(hidden, weights), "fused=False")
        digest = float(out.float().sum())
        every = [None] * world
        dist.all_gather_object(every, digest)
        assert len(set(every)) == 1, f"ranks differ: {every}"
        g.check()
    except AssertionError as exc:
        ok, message = False, str(exc)
    all_ranks_ok(ok, message)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_world_one_matches_local_kernel_and_cublas(dtype: torch.dtype) -> None:
    run_ranks(_soak, 1, "one-gpu", dtype, 1024, 4112, env=COLOCATE_ENV, timeout=600)


def test_two_ranks_exact_over_random_calls() -> None:
    placement = two_rank_placement()
    env = COLOCATE_ENV if placement == "one-gpu" else {}
    run_ranks(_soak, 2, placement, torch.bfloat16, 4096, 37888, env=env, timeout=900)


def _graph(rank: int, world: int, placement: str) -> None:
    from logits_gather.head.table import pick

    device = rank_device(rank, placement)
    dtype, h, columns, capacity = torch.bfloat16, 1024, 4096, 32
    g = LogitsGather(columns, capacity, device=device, dtype=dtype, on_timeout="raise")
    gen = torch.Generator(device=device).manual_seed(3)
    full_w = (torch.randn(world * columns, h, device=device, generator=gen) * 0.05).to(dtype)
    weights = [full_w[r * columns : (r + 1) * columns] for r in range(world)]
    weight = weights[rank].contiguous()
    local = _local(dtype, columns, capacity, device)
    ms = (7, 32, 1)  # an odd number of captured calls, different M
    static = [torch.zeros(m, h, device=device, dtype=dtype) for m in ms]
    for x in static:  # the first eager call compiles; capture after it
        g.linear(x.normal_(), weight, fused=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [g.linear(x, weight, fused=True) for x in static]
    ok, message = True, ""
    try:
        for replay in range(40):
            gen.manual_seed(replay)
            for x in static:
                x.copy_(torch.randn(x.shape, device=device, generator=gen))
            graph.replay()
            if replay % 3 == 0:  # eager calls between replays
                g.linear(static[0], weight, fused=True)
            # graph-mode calls alternate two slots: the first captured result is overwritten
            # by the third within the replay; the last two stay until the next replay
            for m, x, out in list(zip(ms, static, outs, strict=True))[1:]:
                tile = pick(m, h, columns, forced=True)
                assert_bits(out, _expected(local, x, weights, tile), f"replay {replay} M={m}")
        g.check()
    except AssertionError as exc:
        ok, message = False, str(exc)
    all_ranks_ok(ok, message)


@pytest.mark.parametrize("world", [1, 2])
def test_graph_capture_of_an_odd_number_of_calls(world: int) -> None:
    placement = "one-gpu" if world == 1 else two_rank_placement()
    env = COLOCATE_ENV if placement == "one-gpu" else {}
    run_ranks(_graph, world, placement, env=env, timeout=600)
