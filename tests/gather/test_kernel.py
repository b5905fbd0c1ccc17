"""The symmetric-memory kernel on real GPUs: exactness under skew, lifetime,
guards and epoch wrap-around (timeouts: gather/test_timeout.py).

Run on one GPU (ranks share it) or several: ``bash scripts/gpu-tests.sh`` (see
docs/gpu-testing.md). Every rank runs the same sequence of calls, draws its data from a
shared per-call seed, and checks every call bit for bit.
"""

from __future__ import annotations

import random
import time

import pytest
import torch
import torch.distributed as dist

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from scripts.support.placement import COLOCATE_ENV, placement_env, rank_device
from tests.support.gpu import all_ranks_ok, assert_bits, delay_random_rank, placements, random_full

pytestmark = pytest.mark.gpu
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
POISON = -7.0


def _misaligned(x: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = flat[1:].view(x.shape)
    view.copy_(x)
    assert view.is_contiguous() and view.data_ptr() % 16
    return view


def _soak_one(rank, world, device, dtype, columns, capacity, calls, seed) -> None:
    g = LogitsGather(
        columns=columns,
        capacity=capacity,
        device=device,
        dtype=dtype,
        on_timeout="raise",
        timeout_s=60.0,
    )
    assert g.backend == "symm_mem", g.backend
    slots = g._impl._buffers.slots
    slots.fill_(POISON)
    torch.cuda.synchronize()
    dist.barrier()
    rng = random.Random(seed)
    gen = torch.Generator(device=device)
    poison_row = torch.full((world * columns,), POISON, dtype=dtype, device=device)
    previous = None
    for call in range(calls):
        m = rng.randint(1, capacity)
        gen.manual_seed(seed * 100_003 + call)
        full = random_full(gen, m, world * columns, dtype, device)
        shard = full[:, rank * columns : (rank + 1) * columns].contiguous()
        if call % 4 == 3:  # a contiguous shard whose address is not 16-byte aligned
            shard = _misaligned(shard)
        slot = g._impl.slots.eager
        after = (slot + 1) % 3
        # The slot of call k + 1 held call k - 2's result; peers write it only in
        # call k + 1, which they start after this rank arrives at call k.
        slots[after].fill_(POISON)
        delay_random_rank(rng, rank, world)
        allocated = torch.cuda.memory_allocated()
        out = g(shard)
        assert torch.cuda.memory_allocated() == allocated, "a call allocated memory"
        what = f"{dtype} columns={columns} call {call} m={m}"
        assert out.data_ptr() == slots[slot].data_ptr()
        assert_bits(out, full, what)
        assert (slots[slot, m:] == poison_row).all(), f"{what}: rows past m were written"
        if previous is not None:
            assert_bits(previous[0], previous[1], f"{what}: result k-1 after call k")
        previous = (out, full)
    g.check()


def _soak(rank: int, world: int, placement: str, calls: int) -> float:
    device = rank_device(rank, placement)
    start = time.monotonic()
    ok, message = True, ""
    try:
        for dtype in DTYPES:
            for vocab in (1001 * world, 151552, 129280):
                _soak_one(
                    rank,
                    world,
                    device,
                    dtype,
                    vocab // world,
                    48,
                    calls,
                    seed=vocab + world + DTYPES.index(dtype),
                )
    except AssertionError as exc:
        ok, message = False, str(exc)
    all_ranks_ok(ok, message)
    return time.monotonic() - start


@pytest.mark.parametrize("world,placement", placements())
def test_exact_under_skew(world: int, placement: str) -> None:
    env = placement_env(placement)
    run_ranks(_soak, world, placement, 1000, env=env, timeout=900)


def _wraparound(rank: int, world: int) -> None:
    device = rank_device(rank, "one-gpu")
    g = LogitsGather(columns=4096, capacity=8, device=device, dtype=torch.bfloat16)
    flags = g._impl._buffers.flags
    start = 2**31 - 5  # CALLS crosses int32 max; W * calls wraps 2**32 too
    flags[2].fill_(start)
    flags[0].fill_((start * world + 2**31) % 2**32 - 2**31)
    torch.cuda.synchronize()
    dist.barrier()
    gen = torch.Generator(device=device)
    for call in range(40):
        gen.manual_seed(call)
        full = random_full(gen, 1 + call % 8, world * 4096, torch.bfloat16, device)
        out = g(full[:, rank * 4096 : (rank + 1) * 4096].contiguous())
        assert_bits(out, full, f"wrap-around call {call}")
    g.check()


def test_epoch_wraparound() -> None:
    run_ranks(_wraparound, 2, env=COLOCATE_ENV, timeout=300)
