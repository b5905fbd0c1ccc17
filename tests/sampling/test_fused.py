"""The sampling operations on GPUs: the fused Triton path and the filter path.

- min-p's ``log`` in the kernels equals ``torch.log`` bit for bit (the kernels' noise
  and scores against vLLM's own: ``tests/sampling/test_vllm_fused.py``).
- Every operation equals the gathered-logits definition (:mod:`.reference`) computed
  on the same device, at tp 2 (one process per GPU, and two ranks sharing a GPU)
  and tp 4 and 8 spread over the GPUs (rank r on GPU r % G), gloo group. Each
  iteration draws a fresh M, fresh logits with adversarial rows, and delays a
  random rank.
- Graph capture and replay of every operation, with fresh inputs per replay.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from scripts.support.dist import run_ranks
from scripts.support.placement import rank_device
from tests.sampling.step import Step, close, fused_env
from tests.support.gpu import (
    SPILL_TOP_P,
    adversarial_logits,
    delay_random_rank,
    placements,
    spill_logits,
)

pytestmark = pytest.mark.gpu

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
V = 151552
KEEP = {"tp2-per-gpu", "tp2-one-gpu", "tp4-spread"}
CASES = [c for c in placements((2, 4)) if c.id in KEEP]
ITERS = int(os.environ.get("LOGITS_GATHER_TEST_ITERS", "2"))
REPLAYS = int(os.environ.get("LOGITS_GATHER_TEST_REPLAYS", "3"))
TOP_KS = (None, 1, 2, 50, 64, 65, 1000)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def test_min_p_log_bit_identical() -> None:
    """The fused kernels take ``log(min_p)`` with libdevice's ``log`` on the device: its bits
    equal ``torch.log``'s (the definition's) on every subnormal fp32, 0, -0.0, 1 and 2**22
    random normal values in (0, 1)."""
    from tests.sampling.noise_kernels import log_kernel

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    gen = torch.Generator(device=dev).manual_seed(random.randrange(2**31))
    normal = torch.randint(0x00800000, 0x3F800000, (1 << 22,), device=dev, generator=gen,
                           dtype=torch.int32)  # fmt: skip
    ends = torch.tensor([-(2**31), 0x3F800000], dtype=torch.int32, device=dev)  # -0.0, 1.0
    sub = torch.arange(0, 0x00800000, dtype=torch.int32, device=dev)
    bits = torch.cat([sub, normal, ends])
    x = bits.view(torch.float32)
    got = torch.full_like(x, float("nan"))
    log_kernel[(triton_cdiv(x.numel(), 1024),)](x, got, x.numel(), BLOCK=1024)
    diff = _bits(got) != _bits(torch.log(x))
    assert int(diff.sum()) == 0, f"{int(diff.sum())} differ, first at {x[diff][:4].tolist()}"


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _filters(rng: random.Random, m: int, dev: torch.device) -> list[dict]:
    def col(values):
        return torch.tensor([rng.choice(values) for _ in range(m)], device=dev)

    return [
        dict(top_p=0.9),
        dict(min_p=0.05),
        dict(top_p=0.5, top_k=50),
        dict(top_k=20, top_p=col([1.0, 0.9, 0.3]), min_p=0.05),
        dict(
            top_k=col([0, 1, 3, 50, 64, 100, 5000]),
            top_p=col([1.0, 0.3, 0.9, 0.99]),
            min_p=col([0.0, 0.0, 0.05, 0.3]),
        ),
        dict(top_p=col([1.0, 0.8, 1e-6])),
        dict(top_k=col([0, 7, 70, V])),  # 70: top-k's launches, then the rest
        dict(top_k=col([0, 1, 7, 64, V])),  # off rows in top-k's launches (topk.rowk_local)
        dict(top_k=col([0, 5, 50, 300, V]), top_p=0.9),  # in top-p's launches (nucleus_k_row)
        dict(top_k=col([0, 3, 50, V]), min_p=col([0.0, 0.05, 0.3])),
        dict(min_p=col([0.0, 0.01, 0.2, 1.0])),
        dict(min_p=col([0.0, 1e-40, 1e-30, 0.3])),  # subnormal: the kernels' log, as torch.log
        dict(top_k=300, top_p=0.9, min_p=0.05),  # an int k > 64: top-p's launches (cuts.py)
        dict(top_k=col([0, 7, 300]), min_p=col([1e-42, 0.05])),
    ]


def _eager(rank: int, world: int, seed: int, placement: str) -> str:
    from logits_gather import sampling
    from logits_gather.sampling import reference

    dev, n = rank_device(rank, placement), V // world
    sampler = sampling.VocabParallelSampler(n, 256, device=dev, backend="symm_mem")
    assert sampler.backend == "symm_mem", sampler.backend
    assert sampler.fused is not None, "the fused path is not in use"
    f = sampler.fused
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    if placement == "per-gpu":  # one launch per round up to half the SMs, then two
        assert f.single_rows == sms // 2, (f.single_rows, sms)
    else:  # ranks that share a GPU: two launches
        assert f.single_rows == 0, f.single_rows
    rng = random.Random(seed)
    for it in range(max(ITERS, 2)):
        m = (256, f.single_rows or 5)[it] if it < 2 else rng.randint(1, 256)
        dtype = DTYPES[it % 3]
        full = adversarial_logits(seed + it, m, n, world, dtype, dev)
        shard = full[:, rank * n : (rank + 1) * n].contiguous()
        if it == 1:  # columns strided (copied once per call, sampler.py): the same answers
            shard = shard.t().contiguous().t()
        temp = torch.tensor([rng.choice([0.0, 0.6, 1.0, 1.7]) for _ in range(m)], device=dev)
        seeds = torch.tensor([rng.randrange(-(2**63), 2**63) for _ in range(m)], device=dev)
        pos = torch.tensor([rng.randrange(2**31) for _ in range(m)], device=dev)
        ids = torch.tensor([rng.randrange(V) for _ in range(m)], device=dev)
        where = f"it {it} m={m} {dtype}"
        delay_random_rank(rng, rank, world)
        assert torch.equal(sampler.greedy(shard), full.argmax(1)), where
        assert torch.equal(sampling.greedy(shard), full.argmax(1)), where
        if it == 0 and torch.cuda.device_count() > 1:  # launches follow the sampler's device
            with torch.cuda.device((dev.index + 1) % torch.cuda.device_count()):
                got = sampler.sample(shard, temp, seeds, pos, top_k=2)
                assert torch.equal(got, reference.sample(full, temp, seeds, pos, top_k=2)), where
        for k in TOP_KS:
            got = sampler.sample(shard, temp, seeds, pos, top_k=k)
            want = reference.sample(full, temp, seeds, pos, top_k=k)
            assert torch.equal(got, want), f"{where} k={k}: rows {(got != want).nonzero()}"
        for filt in _filters(rng, m, dev):
            delay_random_rank(rng, rank, world)
            got = sampler.sample(shard, temp, seeds, pos, **filt)
            want = reference.sample(full, temp, seeds, pos, **filt)
            assert torch.equal(got, want), f"{where} {filt}: rows {(got != want).nonzero()}"
        spill = spill_logits(m, n, world, dtype, dev)  # round 2 decides every row
        ones = torch.ones(m, device=dev)
        got = sampler.sample(
            spill[:, rank * n : (rank + 1) * n], ones, seeds, pos, top_p=SPILL_TOP_P
        )
        want = reference.sample(spill, ones, seeds, pos, top_p=SPILL_TOP_P)
        assert torch.equal(got, want), f"{where} round 2: rows {(got != want).nonzero()}"
        flags = sampler.fused.topp_flags.tolist()
        if world > 1:  # spill_logits' rows need round 2 only at world >= 2
            assert flags == [False, True], f"{where} round 2: (need, more) = {flags}"
        torch.cuda.synchronize()
        sampler.check()  # a wait that timed out gave up: its call's result is wrong
        for top_n in (0, 1, 5, 20):
            got = sampler.logprobs(shard, ids, top_n=top_n)
            want = reference.logprobs(full, ids, top_n=top_n)
            close(got.logprobs, want.logprobs, where)
            assert torch.equal(got.top_ids, want.top_ids), f"{where} top_n={top_n}"
            close(got.top_logprobs, want.top_logprobs, where)
    torch.cuda.synchronize()
    return sampler.backend


def _graphs(rank: int, world: int, seed: int, placement: str, n: int) -> int:
    """Captures every operation in one graph and replays it with fresh inputs
    (an odd number of replays, a delayed rank)."""
    step = Step(rank, world, seed, placement, n)
    sampler = step.sampler
    step.fill(0)
    step()  # builds every exchange this graph uses (collective), outside capture
    torch.cuda.synchronize()
    sampler.check()  # the first calls load every kernel: none may have timed out
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    # The graph reads the scalar filters' rows that the eager step cached: the sampler must
    # hold them after its cache drops them, or these NaN rows (alive until the replays end)
    # would take their memory.
    sampler.filled.clear()
    nan = torch.full((64, 1), float("nan"), dtype=torch.float64, device=step.dev)
    _junk = [nan.clone() for _ in range(256)]
    replays = REPLAYS
    rng = random.Random(seed)
    for i in range(1, replays + 1):
        step.fill(i)
        delay_random_rank(rng, rank, world)
        graph.replay()
        torch.cuda.synchronize()
        sampler.check()  # a wait that timed out in a replay gave up: fail here, not later
        step.check(out, f"replay {i}", captured=True)
    torch.cuda.synchronize()
    return replays


@pytest.mark.parametrize("world_size,placement", CASES)
def test_matches_gathered(world_size: int, placement: str) -> None:
    results = run_ranks(
        _eager,
        world_size,
        random.randrange(2**31),
        placement,
        env=fused_env(placement),
        timeout=900,
    )
    assert results == ["symm_mem"] * world_size


def test_one_rank_matches_gathered() -> None:
    """World size 1 on its own GPU: eager rounds take one launch up to half the SMs'
    rows, two above."""
    results = run_ranks(_eager, 1, random.randrange(2**31), "per-gpu", env=fused_env("per-gpu"),
                        timeout=900)  # fmt: skip
    assert results == ["symm_mem"]


@pytest.mark.parametrize("world_size,placement", CASES)
def test_cuda_graph_replay(world_size: int, placement: str) -> None:
    results = run_ranks(
        _graphs,
        world_size,
        random.randrange(2**31),
        placement,
        4099,
        env=fused_env(placement),
        timeout=900,
    )
    assert results == [REPLAYS] * world_size
