"""On CUDA too, nothing in the library holds the process group after the documented
teardown (delete gathers and samplers, ``free_samplers()``, ``destroy_process_group()``):
the fused path's mailboxes and the torch path's exchanges. The call check's NCCL channel
needs one process per GPU; the CPU twin, ``tests/package/test_teardown.py``, covers it with a
stand-in and says why the teardown matters."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.distributed as dist

from logits_gather import LogitsGather, sampling
from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import two_rank_placement

pytestmark = pytest.mark.gpu
COLUMNS = 151552 // 2


def _use_then_teardown(rank: int, world: int, placement: str) -> tuple[bool, bool, bool]:
    device = rank_device(rank, placement)
    group = weakref.ref(dist.group.WORLD)
    gather = LogitsGather(COLUMNS, capacity=8, device=device, dtype=torch.bfloat16,
                          check_calls=True)  # fmt: skip
    calls = getattr(gather, "_calls", None)
    channel = weakref.ref(calls._group) if calls is not None and calls._group else None
    torch_path = sampling.VocabParallelSampler(COLUMNS, 8, device, fused=False)
    gen = torch.Generator(device=device).manual_seed(rank)
    fused = None
    for m in (3, 8, 20):  # the module functions' sampler grows past 8
        shard = torch.randn(m, COLUMNS, device=device, dtype=torch.bfloat16, generator=gen)
        t = torch.full((m,), 0.8, device=device)
        seed = torch.arange(m, device=device)
        tokens = sampling.sample(shard, t, seed, top_k=50, top_p=0.9, min_p=0.01)
        top_p = sampling.sample(shard, t, seed, top_p=0.9)
        greedy = sampling.greedy(shard)
        sampling.logprobs(shard, tokens, top_n=2)
        if m <= 8:
            full = gather(shard)
            assert torch.equal(greedy, full.float().argmax(1)), (rank, m)
            assert torch.equal(torch_path.greedy(shard), greedy), (rank, m)
            ref = torch_path.sample(shard, t, seed, top_p=0.9)
            assert torch.equal(ref, top_p), (rank, m)
        fused = sampling.cached_sampler(shard).fused is not None
    del gather, torch_path, calls
    sampling.free_samplers()
    dist.destroy_process_group()
    gc.collect()
    return group() is None, channel is None or channel() is None, fused


@pytest.mark.parametrize("world", [1, 2])
def test_teardown_releases_the_group(world: int) -> None:
    placement = "one-gpu" if world == 1 else two_rank_placement()
    result = run_ranks(_use_then_teardown, world, placement, env=placement_env(placement),
                       timeout=300)  # fmt: skip
    assert [r[:2] for r in result] == [(True, True)] * world, result
