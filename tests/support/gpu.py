"""Shared pieces of the GPU tests: placement cases, per-call data and checks. The skip
without a GPU is ``tests/conftest.py``'s; where ranks go, ``scripts/support/placement.py``."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from logits_gather.bench.machine import mps_running
from scripts.support.placement import gpus
from tests.support.data import same_bits

_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def skip_trap_under_mps() -> None:
    """Skips a test that traps a kernel on purpose while an MPS daemon runs (as
    scripts/gpu-tests.sh starts one). A fatal fault under MPS ends every client of the
    GPU and leaves the server refusing new clients (CUDA error 807) until they have all
    exited, pytest's own process included once an in-process test has touched the GPU:
    every later test of the run would fail. Measured on one H100: after
    ``trap-dead-greedy`` every test that followed failed at CUDA initialisation with
    error 807."""
    if mps_running():
        pytest.skip(
            "a deliberate trap under MPS ends every client of the GPU and every later "
            "test's CUDA initialisation: run LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh "
            "tests/gather/test_timeout.py tests/sampling/test_timeout.py"
        )


def placements(worlds: tuple[int, ...] = (2, 4, 8)) -> list:
    """(world, placement) cases. ``one-gpu``: every rank on cuda:0; ``per-gpu``: one
    process per GPU (skipped without ``world`` GPUs); ``spread``: rank r on GPU
    r % G when there are 2 <= G < world GPUs, so flags cross real links while
    ranks share GPUs (skipped otherwise). Ranks that share a GPU want an MPS
    daemon (scripts/gpu-tests.sh starts one)."""
    count = gpus()
    cases = []
    for w in worlds:
        cases.append(pytest.param(w, "one-gpu", id=f"tp{w}-one-gpu"))
        cases.append(
            pytest.param(
                w,
                "per-gpu",
                id=f"tp{w}-per-gpu",
                marks=pytest.mark.skipif(count < w, reason=f"needs {w} GPUs, found {count}"),
            )
        )
        if w > 2:  # two ranks cannot spread over fewer GPUs than ranks but at least two
            cases.append(
                pytest.param(
                    w,
                    "spread",
                    id=f"tp{w}-spread",
                    marks=pytest.mark.skipif(
                        not 2 <= count < w,
                        reason=f"needs 2 to {w - 1} GPUs, found {count}",
                    ),
                )
            )
    return cases


def two_rank_placement() -> str:
    """Where a two-rank test runs: one process per GPU when there are two, else one GPU."""
    return "per-gpu" if gpus() >= 2 else "one-gpu"


def random_full(
    gen: torch.Generator, m: int, width: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    bits = _BITS[dtype]
    info = torch.iinfo(bits)
    raw = torch.randint(
        info.min, info.max + 1, (m, width), dtype=bits, device=device, generator=gen
    )
    return raw.view(dtype)


def delay_random_rank(rng: random.Random, rank: int, world: int) -> None:
    """Puts a random rank 0-300 us behind the others (same choice on every rank)."""
    victim, cycles = rng.randrange(world), rng.randrange(0, 600_000)
    if rank == victim:
        torch.cuda._sleep(cycles)


def assert_bits(out: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    if not same_bits(out, expected):
        diff = (out.view(_BITS[out.dtype]) != expected.view(_BITS[out.dtype])).nonzero()
        raise AssertionError(f"{what}: {len(diff)} elements differ, first at {diff[:4].tolist()}")


def all_ranks_ok(ok: bool, message: str) -> None:
    """Aggregates a verdict across ranks so no rank exits early and strands peers."""
    flags: list = [None] * dist.get_world_size()
    dist.all_gather_object(flags, (ok, message))
    bad = [f"rank {r}: {m}" for r, (o, m) in enumerate(flags) if not o]
    assert not bad, "; ".join(bad)


def adversarial_logits(
    seed: int, m: int, n: int, world: int, dtype: torch.dtype, dev: torch.device
) -> torch.Tensor:
    """Random logits (the same on every rank) with adversarial rows at the top."""
    v = n * world
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(m, v, device=dev, generator=gen).mul_(3)
    few = torch.randint(-4, 4, (m, v), device=dev, generator=gen).float()
    for i in range(min(m, 8)):
        case = i % 8
        if case == 0:
            x[i] = float("-inf")
        elif case == 1:
            x[i, [5 * n // 2 % v, (n + 1) % v]] = float("nan")
        elif case == 2:  # the same maximum at every shard's first and last column
            x[i, [c for b in range(0, v, n) for c in (b, b + n - 1)]] = 50.0
        elif case == 3:
            x[i, [3, v - 1]] = float("inf")
        elif case in (4, 5):  # few distinct values: top-p and top-k cut inside runs
            x[i] = few[i] * (0.5 if case == 4 else 3.0)
        elif case == 6:  # one dominant logit and a long equal tail
            x[i] = -2.0
            x[i, (i * 7919) % v] = 6.0
    return x.to(dtype)


def spill_logits(m: int, n: int, world: int, dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """Rows that top-p's round 1 leaves to round 2, which decides them (at T = 1 and
    ``top_p`` = :data:`SPILL_TOP_P`; ``n >= 2118`` columns per rank, ``world >= 2``).
    Rank 0's first split holds 40 values in (9.5, 10], its second 35 in (9.0, 9.5] and 35
    in (8.5, 9.0], too many for its candidate slots (55 to 64): it leaves out 9.0 and
    below. The last rank's first split holds 20 values in (8.5, 9.0], all sent. The
    candidates above 9.0 carry 74.9% of the mass, all of them 84.1%: round 2 gathers
    everything at or above 8.9375 (45 elements of rank 0's second split) and decides.
    Every other logit is -20 (no mass). Values step by 1/16, exact in every dtype."""
    steps = 0.0625 * (torch.arange(60, device=dev) % 8)
    x = torch.full((m, n * world), -20.0, device=dev)
    x[:, :40] = 10.0 - steps[:40]
    x[:, 2048:2083] = 9.5 - steps[:35]
    x[:, 2083:2118] = 9.0 - steps[:35]
    start = (world - 1) * n
    x[:, start : start + 20] = 9.0 - steps[:20]
    return x.to(dtype)


SPILL_TOP_P = 0.775
"""The ``top_p`` of :func:`spill_logits`'s rows."""
