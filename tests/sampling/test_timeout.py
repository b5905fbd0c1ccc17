"""The fused sampling kernels with a dead or stalled peer (GPU, 2 ranks).

Rank 1 skips a call. ``raise``: rank 0's final kernel gives up after ``timeout_s``
and ``check()`` raises PeerTimeoutError, as does the next call. ``trap``: the
kernel aborts, CUDA reports it at the next synchronising call, and ``check()``
names the cause. A stalled peer that calls late still gets the right answer.

``top_p`` uses flat rows, which the candidate round cannot decide, so the call goes on
into the in-kernel fallback (kernels/topp_exact.py) after the first wait has timed out. The
fallback must see the timeout and skip its own waits: with ``raise`` the call costs three
timeouts (the greedy round's wait, then round 1's two: its heads and its candidates), not
more per pass of the fallback. A stalled peer there either gets the right tokens or times
out itself (rank 0 gave up before writing the fallback's data), never wrong tokens.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from logits_gather import PeerTimeoutError
from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import skip_trap_under_mps, two_rank_placement

pytestmark = pytest.mark.gpu
COLUMNS = 8192


def _run(rank: int, world: int, placement: str, mode: str, peer: str, op: str) -> str:
    from logits_gather.sampling import VocabParallelSampler, reference

    dev = rank_device(rank, placement)
    sampler = VocabParallelSampler(COLUMNS, 4, device=dev, timeout_s=1.0, on_timeout=mode)
    assert sampler.fused is not None
    gen = torch.Generator(device=dev).manual_seed(7)
    full = torch.randn(3, world * COLUMNS, device=dev, generator=gen)
    shard = full[:, rank * COLUMNS : (rank + 1) * COLUMNS].contiguous()
    t = torch.ones(3, device=dev)
    seeds = torch.randint(0, 1 << 40, (3,), device=dev, generator=gen)

    def call() -> torch.Tensor:
        if op == "greedy":
            return sampler.greedy(shard)
        return sampler.sample(shard, t, seeds, top_p=0.9)

    want = full.argmax(1) if op == "greedy" else reference.sample(full, t, seeds, top_p=0.9)
    assert torch.equal(call(), want)  # one good call first
    torch.cuda.synchronize()
    dist.barrier()
    message = "peer"
    if rank == 0:
        started = time.monotonic()
        call()
        if mode == "raise":
            torch.cuda.synchronize()
            waited = time.monotonic() - started
            timeouts = 1 if op == "greedy" else 3  # top_p: greedy's round, then round 1's two
            assert 0.9 < waited < timeouts + 1.6, f"waited {waited:.1f} s"
            with pytest.raises(PeerTimeoutError, match="timed out") as info:
                sampler.check()
            with pytest.raises(PeerTimeoutError):
                call()
            message = f"{info.value} (waited {waited:.2f} s)"
        else:
            with pytest.raises(RuntimeError) as cuda_error:
                torch.cuda.synchronize()
            with pytest.raises(PeerTimeoutError, match="trapped") as info:
                sampler.check()
            message = f"{cuda_error.value} || {info.value}"
    elif peer == "stalled":
        time.sleep(3.0)
        got = call()
        if op == "greedy":
            torch.cuda.synchronize()
            assert torch.equal(got, want), "the stalled peer's late call"
        else:  # right tokens, or its own timeout (an error or a trap), never wrong tokens
            trapped = None
            try:
                torch.cuda.synchronize()
            except RuntimeError as e:  # a trap; check() names its cause
                trapped = e
            try:
                sampler.check()
                assert trapped is None, trapped
                assert torch.equal(got, want), "the stalled peer's late call"
                message = "peer: right tokens"
            except PeerTimeoutError as e:
                message = f"peer: {e}"
    else:
        time.sleep(3.0)  # dead: never calls, but keeps its memory mapped until rank 0 is done
    dist.barrier()
    return message


@pytest.mark.parametrize("op", ["greedy", "top_p"])
@pytest.mark.parametrize("peer", ["dead", "stalled"])
@pytest.mark.parametrize("mode", ["raise", "trap"])
def test_sampler_peer_timeout(mode: str, peer: str, op: str) -> None:
    if mode == "trap":
        skip_trap_under_mps()
    p = two_rank_placement()
    args = (mode, peer, op)
    messages = run_ranks(_run, 2, p, *args, env=placement_env(p), timeout=120, hard_exit=True)
    print(messages)
    assert "timed out" in messages[0], messages
