"""The fused sampling kernels' waits under contention: the graph test's operations run
eagerly, the stream synchronised after every call, for several steps with fresh inputs.

That pattern (two ranks sharing one H200, sessions 10 and 11) made a multi-warp final
kernel compute a top-p row wrongly on one rank in most passes while its poll's exit
test was warp-local (:mod:`logits_gather.sampling.kernels.exchange`, "Uniform polls"): its warps
left the poll apart and met the wrong barriers. Every call is checked against the
reference and for timed-out waits (a wait that gives up returns stale words).
"""

from __future__ import annotations

import random

import pytest
import torch

from scripts.support.dist import run_ranks
from tests.sampling.step import Step, fused_env
from tests.support.gpu import delay_random_rank, placements

pytestmark = pytest.mark.gpu

STEPS = 6
CASES = [c for c in placements((2, 4)) if c.id in {"tp2-per-gpu", "tp2-one-gpu", "tp4-spread"}]


def _synced(rank: int, world: int, seed: int, placement: str, n: int) -> int:
    step = Step(rank, world, seed, placement, n)
    rng = random.Random(seed)
    for i in range(STEPS):
        step.fill(i)
        delay_random_rank(rng, rank, world)
        out = []
        for call in step.calls():
            out.append(call())
            torch.cuda.synchronize()
            step.sampler.check()  # raises for a wait that timed out (LOGITS_GATHER_ON_TIMEOUT)
        step.check(tuple(out), f"step {i}")
    return STEPS


@pytest.mark.parametrize("world_size,placement", CASES)
def test_synced_calls_agree(world_size: int, placement: str) -> None:
    results = run_ranks(
        _synced,
        world_size,
        random.randrange(2**31),
        placement,
        4099,
        env={
            **fused_env(placement),
            "LOGITS_GATHER_ON_TIMEOUT": "raise",
            "LOGITS_GATHER_TIMEOUT_S": "10",
        },
        timeout=600,
    )
    assert results == [STEPS] * world_size
