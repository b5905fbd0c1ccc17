"""A dead or stalled peer, in both ``on_timeout`` modes (GPU).

``raise``: the waiting rank's call returns after ``timeout_s``, and ``check()`` and the
next call raise PeerTimeoutError. ``trap``: the waiting rank's kernel aborts on the
device, its CUDA context reports the failure to the next synchronising call, and
``check()`` names the cause from the status block the kernel wrote before trapping.
A stalled (not dead) peer that calls later still gets complete data: the timed-out
rank had stored its shard and signalled before it started waiting.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from logits_gather import LogitsGather, PeerTimeoutError
from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import assert_bits, random_full, skip_trap_under_mps, two_rank_placement

pytestmark = pytest.mark.gpu
COLUMNS = 4096


def _timeout(rank: int, world: int, placement: str, mode: str, peer: str) -> str:
    device = rank_device(rank, placement)
    g = LogitsGather(columns=COLUMNS, capacity=4, device=device, timeout_s=1.0, on_timeout=mode)
    assert g.backend == "symm_mem", g.backend
    gen = torch.Generator(device=device).manual_seed(5)
    full = random_full(gen, 3, world * COLUMNS, torch.bfloat16, device)
    shard = full[:, rank * COLUMNS : (rank + 1) * COLUMNS].contiguous()
    torch.cuda.synchronize()
    dist.barrier()
    message = "peer"
    if rank == 0:
        started = time.monotonic()
        g(shard)
        if mode == "raise":
            torch.cuda.synchronize()
            waited = time.monotonic() - started
            assert 0.9 < waited < 30, f"waited {waited:.1f} s"
            with pytest.raises(PeerTimeoutError, match="exit barrier") as info:
                g.check()
            assert "incomplete" in str(info.value)
            with pytest.raises(PeerTimeoutError):
                g(shard)
            message = str(info.value)
        else:
            with pytest.raises(RuntimeError) as cuda_error:  # the trap, reported by CUDA
                torch.cuda.synchronize()
            waited = time.monotonic() - started
            assert 0.9 < waited < 30, f"trapped after {waited:.1f} s"
            with pytest.raises(PeerTimeoutError, match="exit barrier") as info:
                g.check()
            assert "trap" in str(info.value)
            message = f"{cuda_error.value} || {info.value}"
    elif peer == "stalled":
        time.sleep(3.0)  # past rank 0's timeout
        out = g(shard)
        torch.cuda.synchronize()
        assert_bits(out, full, "the stalled peer's late call")
        g.check()
    dist.barrier()  # gloo: works even after rank 0's CUDA context died
    return message


@pytest.mark.parametrize("peer", ["dead", "stalled"])
@pytest.mark.parametrize("mode", ["raise", "trap"])
def test_peer_timeout(mode: str, peer: str) -> None:
    if mode == "trap":
        skip_trap_under_mps()
    placement = two_rank_placement()
    messages = run_ranks(
        _timeout,
        2,
        placement,
        mode,
        peer,
        env=placement_env(placement),
        timeout=120,
        hard_exit=mode == "trap",
    )
    assert "CTA" in messages[0]
