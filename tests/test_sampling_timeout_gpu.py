"""The fused sampling kernels with a dead or stalled peer (GPU, 2 ranks).

Rank 1 skips a call. ``raise``: rank 0's final kernel gives up after ``timeout_s``
and ``check()`` raises PeerTimeoutError, as does the next call. ``trap``: the
kernel aborts, CUDA reports it at the next synchronising call, and ``check()``
names the cause. A stalled peer that calls late still gets the right answer.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from logits_gather import PeerTimeoutError
from tests.dist import run_ranks
from tests.gpu import needs_gpu, placement_env, rank_device, two_rank_placement

pytestmark = [pytest.mark.gpu, needs_gpu]
COLUMNS = 8192
MPS = "CUDA_MPS_PIPE_DIRECTORY"
"""Set where scripts/gpu-tests.sh started an MPS daemon."""


def _run(rank: int, world: int, placement: str, mode: str, peer: str) -> str:
    from logits_gather.sampling import VocabParallelSampler

    dev = rank_device(rank, placement)
    sampler = VocabParallelSampler(COLUMNS, 4, device=dev, timeout_s=1.0, on_timeout=mode)
    assert sampler.fused is not None
    gen = torch.Generator(device=dev).manual_seed(7)
    full = torch.randn(3, world * COLUMNS, device=dev, generator=gen)
    shard = full[:, rank * COLUMNS : (rank + 1) * COLUMNS].contiguous()
    assert torch.equal(sampler.greedy(shard), full.argmax(1))  # one good call first
    torch.cuda.synchronize()
    dist.barrier()
    message = "peer"
    if rank == 0:
        started = time.monotonic()
        sampler.greedy(shard)
        if mode == "raise":
            torch.cuda.synchronize()
            waited = time.monotonic() - started
            assert 0.9 < waited < 30, f"waited {waited:.1f} s"
            with pytest.raises(PeerTimeoutError, match="timed out") as info:
                sampler.check()
            with pytest.raises(PeerTimeoutError):
                sampler.greedy(shard)
            message = str(info.value)
        else:
            with pytest.raises(RuntimeError) as cuda_error:
                torch.cuda.synchronize()
            with pytest.raises(PeerTimeoutError, match="trapped") as info:
                sampler.check()
            message = f"{cuda_error.value} || {info.value}"
    elif peer == "stalled":
        time.sleep(3.0)
        got = sampler.greedy(shard)
        torch.cuda.synchronize()
        assert torch.equal(got, full.argmax(1)), "the stalled peer's late call"
    else:
        time.sleep(3.0)  # dead: never calls, but keeps its memory mapped until rank 0 is done
    dist.barrier()
    return message


@pytest.mark.parametrize("peer", ["dead", "stalled"])
@pytest.mark.parametrize("mode", ["raise", "trap"])
def test_sampler_peer_timeout(mode: str, peer: str) -> None:
    p = two_rank_placement()
    if mode == "trap" and peer == "stalled" and p != "per-gpu" and os.environ.get(MPS):
        pytest.skip("under MPS a trap ends every client of the GPU, the stalled peer too: "
                    "run with LOGITS_GATHER_NO_MPS=1 (scripts/gpu-tests.sh)")  # fmt: skip
    messages = run_ranks(_run, 2, p, mode, peer, env=placement_env(p), timeout=120, hard_exit=True)
    assert "timed out" in messages[0], messages
