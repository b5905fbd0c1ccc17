"""The sampling operations on the symmetric-memory fast path (GPU).

Ranks sit on ``cuda:rank`` when there are enough GPUs, otherwise all on
``cuda:0`` (``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``), with a gloo group.
Every rank builds the same full logits on its GPU from a shared seed; results
must equal the gathered-logits definitions computed on the same device. Each
iteration draws a fresh M and delays one rank with ``torch.cuda._sleep``.
"""

from __future__ import annotations

import random

import pytest
import torch

from tests.dist import run_ranks

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

COLOCATE = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOL = 2e-5  # |ours - torch.log_softmax(fp32)| <= TOL * (1 + |ref|)
SLEEP_CYCLES = 2_000_000


def _device(rank: int, world: int) -> torch.device:
    dev = torch.device("cuda", rank if torch.cuda.device_count() >= world else 0)
    torch.cuda.set_device(dev)
    return dev


def _logits(seed: int, m: int, v: int, n: int, dtype: torch.dtype,
            dev: torch.device) -> torch.Tensor:
    """Random logits (the same on every rank) with adversarial rows at the top."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(m, v, device=dev, generator=gen).mul_(3)
    rows = [("-inf",), ("nan", 5 * n // 2, n + 1), ("edges",), ("inf", 3, v - 1)]
    for i, (case, *cols) in enumerate(rows[:m]):
        if case == "-inf":
            x[i] = float("-inf")
        elif case == "edges":  # the same maximum at every shard's first and last column
            x[i, [c for b in range(0, v, n) for c in (b, b + n - 1)]] = 50.0
        else:
            x[i, [c % v for c in cols]] = float(case)
    return x.to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), f"{where}: NaN pattern differs"
    err = (got[~nan] - want[~nan]).abs().nan_to_num(0.0)
    assert bool((err <= TOL * (1 + want[~nan].abs())).all()), f"{where}: max error {err.max()}"


def _eager(rank: int, world: int, seed: int, n: int) -> str:
    from logits_gather import sampling
    from logits_gather.sampling import reference

    dev, v = _device(rank, world), n * world
    sampler = sampling.VocabParallelSampler(n, 256, device=dev, backend="symm_mem")
    assert sampler.backend == "symm_mem", sampler.backend
    rng = random.Random(seed)
    for it in range(8):
        m, dtype = rng.randint(1, 256), DTYPES[it % 3]
        full = _logits(seed + it, m, v, n, dtype, dev)
        shard = full[:, rank * n:(rank + 1) * n].contiguous()
        temp = torch.tensor([rng.choice([0.0, 0.6, 1.0, 1.7]) for _ in range(m)], device=dev)
        seeds = torch.tensor([rng.randrange(-2**63, 2**63) for _ in range(m)], device=dev)
        ids = torch.tensor([rng.randrange(v) for _ in range(m)], device=dev)
        where = f"it {it} m={m} {dtype}"
        if rank == it % world:
            torch.cuda._sleep(SLEEP_CYCLES)
        assert torch.equal(sampler.greedy(shard), full.argmax(1)), where
        assert torch.equal(sampling.greedy(shard), full.argmax(1)), where
        for k in (None, 1, 50, 1000):
            got = sampler.sample(shard, temp, seeds, top_k=k)
            assert torch.equal(got, reference.sample(full, temp, seeds, k)), f"{where} k={k}"
        for top_n in (0, 20):
            got = sampler.logprobs(shard, ids, top_n=top_n)
            want = reference.logprobs(full, ids, top_n)
            _close(got.logprobs, want.logprobs, where)
            assert torch.equal(got.top_ids, want.top_ids), f"{where} top_n={top_n}"
            _close(got.top_logprobs, want.top_logprobs, where)
    assert sampling.cached_sampler(shard).backend == "symm_mem"
    torch.cuda.synchronize()
    return sampler.backend


def _graphs(rank: int, world: int, seed: int, n: int) -> int:
    """Captures greedy, sample (with and without top_k) and logprobs in one graph and
    replays it with fresh inputs (an odd number of replays, a delayed rank)."""
    from logits_gather import sampling
    from logits_gather.sampling import reference

    dev, v, m = _device(rank, world), n * world, 37
    sampler = sampling.VocabParallelSampler(n, 64, device=dev, backend="symm_mem",
                                            check_values=False)
    shard = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    temp = torch.empty(m, device=dev)
    seeds = torch.empty(m, dtype=torch.int64, device=dev)
    ids = torch.empty(m, dtype=torch.int64, device=dev)

    def fill(i: int) -> torch.Tensor:
        full = _logits(seed + i, m, v, n, torch.bfloat16, dev)
        gen = torch.Generator(device=dev).manual_seed(seed + 1000 + i)
        shard.copy_(full[:, rank * n:(rank + 1) * n])
        u = torch.rand(m, device=dev, generator=gen)
        temp.copy_(torch.where(u < 0.2, 0.0, u * 2))  # about a fifth greedy rows
        seeds.copy_(torch.randint(-2**62, 2**62, (m,), device=dev, generator=gen))
        ids.copy_(torch.randint(0, v, (m,), device=dev, generator=gen))
        return full

    def step():
        return (sampler.greedy(shard), sampler.sample(shard, temp, seeds),
                sampler.sample(shard, temp, seeds, top_k=20), sampler.logprobs(shard, ids, 5))

    fill(0)
    step()  # builds every exchange this graph uses (collective), outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    replays = 7
    for i in range(1, replays + 1):
        full = fill(i)
        if rank == i % world:
            torch.cuda._sleep(SLEEP_CYCLES)
        graph.replay()
        g, s, s20, lp = out
        assert torch.equal(g, full.argmax(1)), f"replay {i}"
        assert torch.equal(s, reference.sample(full, temp, seeds)), f"replay {i}"
        assert torch.equal(s20, reference.sample(full, temp, seeds, 20)), f"replay {i}"
        want = reference.logprobs(full, ids, 5)
        _close(lp.logprobs, want.logprobs, f"replay {i}")
        assert torch.equal(lp.top_ids, want.top_ids), f"replay {i}"
    torch.cuda.synchronize()
    return replays


# (world size, columns per rank): the real vocabulary, and an odd N (unaligned rows).
CASES = [(2, 75776), (4, 37888), (3, 50001)]


@pytest.mark.parametrize("world_size,columns", CASES)
def test_fast_path_matches_gathered(world_size: int, columns: int) -> None:
    results = run_ranks(_eager, world_size, random.randrange(2**31), columns, env=COLOCATE,
                        timeout=600)
    assert results == ["symm_mem"] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
def test_cuda_graph_replay(world_size: int) -> None:
    results = run_ranks(_graphs, world_size, random.randrange(2**31), 4099, env=COLOCATE,
                        timeout=600)
    assert results == [7] * world_size
