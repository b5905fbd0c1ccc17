"""After the documented teardown (delete your gathers and samplers, ``free_samplers()``,
``dist.destroy_process_group()``), nothing in the library holds the process group.

A group that outlives ``destroy_process_group`` is destroyed at interpreter exit instead,
which can abort the process ("terminate called without an active exception"; it failed
the README's example in CI once). The checks use a weak reference to the group."""

from __future__ import annotations

import gc
import weakref

import torch
import torch.distributed as dist

from logits_gather import LogitsGather, sampling
from scripts.support.dist import run_ranks


def _use_then_teardown(rank: int, world: int, own_sampler: bool) -> bool:
    group = weakref.ref(dist.group.WORLD)
    columns = 40
    gather = LogitsGather(columns, capacity=8, device="cpu", dtype=torch.float32)
    sampler = sampling.VocabParallelSampler(columns, 8, "cpu") if own_sampler else None
    torch.manual_seed(rank)
    for m in (3, 8):  # the module functions' sampler grows (and keeps the old exchanges)
        shard = torch.randn(m, columns)
        gather(shard)
        temperature = torch.full((m,), 0.8)
        seed = torch.arange(m)
        if sampler is not None:
            sampler.sample(shard, temperature, seed, top_k=5, top_p=0.9)
            sampler.logprobs(shard, sampler.greedy(shard), top_n=2)
        else:
            sampling.sample(shard, temperature, seed, top_k=5, top_p=0.9, min_p=0.01)
            sampling.logprobs(shard, sampling.greedy(shard), top_n=2)
    del gather, sampler
    if not own_sampler:
        sampling.free_samplers()
    dist.destroy_process_group()
    gc.collect()
    return group() is None


def test_module_functions_release_the_group() -> None:
    assert run_ranks(_use_then_teardown, 2, False) == [True, True]


def test_own_sampler_releases_the_group() -> None:
    assert run_ranks(_use_then_teardown, 2, True) == [True, True]


def _channel_teardown(rank: int, world: int) -> tuple[bool, bool]:
    import pytest

    import logits_gather.calls as calls

    with pytest.MonkeyPatch.context() as mp:  # as for NCCL: the call check's own gloo group
        mp.setattr(calls, "_runs_gloo", lambda group: False)
        group = weakref.ref(dist.group.WORLD)
        gather = LogitsGather(6, capacity=4, device="cpu", dtype=torch.float32, check_calls=True)
        channel = weakref.ref(gather._calls._group)
        gather(torch.randn(3, 6))
        del gather
        dist.destroy_process_group()
        gc.collect()
        return group() is None, channel() is None


def test_call_check_channel_releases_the_group() -> None:
    assert run_ranks(_channel_teardown, 2) == [(True, True)] * 2
