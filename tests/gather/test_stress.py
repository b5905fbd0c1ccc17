"""Stress (GPU): 10,000 consecutive calls, each with a random object (dtype and width),
a random M, a randomly delayed rank and poisoned guard rows, every call checked
bit for bit, at every placement the machine allows.

``LOGITS_GATHER_STRESS_CALLS`` changes the call count (default 10,000).
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import all_ranks_ok, assert_bits, delay_random_rank, placements, random_full

pytestmark = pytest.mark.gpu
CALLS = int(os.environ.get("LOGITS_GATHER_STRESS_CALLS", "10000"))
CAPACITY = 32
POISON = {torch.bfloat16: -5.0, torch.float16: -5.0, torch.float32: -5.0}


def _stress(rank: int, world: int, placement: str, calls: int) -> int:
    device = rank_device(rank, placement)
    kinds = [
        (dtype, width)
        for dtype in (torch.bfloat16, torch.float16, torch.float32)
        for width in (1001, 151552 // world)
    ]
    # A failing rank stops calling: its peers then time out (and raise) instead of hanging.
    gathers = [
        LogitsGather(
            columns=w,
            capacity=CAPACITY,
            device=device,
            dtype=d,
            graphs=False,
            timeout_s=20.0,
            on_timeout="raise",
        )
        for d, w in kinds
    ]
    for g in gathers:
        assert g.backend == "symm_mem", g.backend
        g._impl._buffers.slots.fill_(POISON[g.dtype])
    torch.cuda.synchronize()
    rng = random.Random(2026 + world)  # the same sequence on every rank
    gen = torch.Generator(device=device)
    ok, message, done = True, "", 0
    try:
        for call in range(calls):
            i = rng.randrange(len(gathers))
            g, (dtype, width) = gathers[i], kinds[i]
            m = rng.randint(1, CAPACITY)
            gen.manual_seed(call)
            full = random_full(gen, m, world * width, dtype, device)
            shard = full[:, rank * width : (rank + 1) * width].contiguous()
            slot = g._impl.slots.eager
            # the slot this call writes held call k-3's rows; peers write it only in this
            # call, which they start after this rank issued call k-1
            g._impl._buffers.slots[slot, m:].fill_(POISON[dtype])
            delay_random_rank(rng, rank, world)
            out = g(shard)
            assert_bits(out, full, f"call {call} ({dtype}, width {width}, M={m})")
            guard = g._impl._buffers.slots[slot, m:]
            assert bool((guard == POISON[dtype]).all()), f"call {call}: rows past M written"
            done += 1
        for g in gathers:
            g.check()
    except AssertionError as exc:
        ok, message = False, str(exc)
    all_ranks_ok(ok, message)
    return done


@pytest.mark.parametrize("world,placement", placements())
def test_stress(world: int, placement: str) -> None:
    done = run_ranks(_stress, world, placement, CALLS, env=placement_env(placement), timeout=900)
    assert done == [CALLS] * world
