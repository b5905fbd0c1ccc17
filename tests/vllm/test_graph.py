"""The CUDA-graph pattern of vLLM 0.33's V2 EAGLE/MTP drafter, on LogitsGather alone
(no vLLM needed): what the plugin relies on when it serves drafters inside FULL graphs.

As ``target_dependent_ar/speculator.py`` and ``v1/worker/gpu/cudagraph_utils.py`` do:
the drafter's object (``graphs=True``) is built and called eagerly first (the
profiling dummy ``propose``), then for each batch size an eager warm-up and a
capture run on a side stream (``graph_capture``), each graph chaining K draft
steps "shard = h @ W; logits = gather(shard); token = argmax(logits); h = E[token]"
(each result consumed right after its gather, inside the graph). Replays on the
main stream then alternate with eager target-model gathers (another object,
``graphs=False``) and eager drafter steps for batch sizes without a graph. Every
gathered row is checked bit for bit against the ranks' own shards gathered
through gloo on the host, and every token against the argmax of that.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import all_ranks_ok, assert_bits, delay_random_rank, placements

pytestmark = pytest.mark.gpu
VOCAB, HIDDEN, STEPS, SIZES = 151_936, 64, 3, (1, 3, 8)


class _Chain:
    """Static buffers of one captured batch size (vLLM's fixed-address inputs)."""

    def __init__(self, m: int, cols: int, device: torch.device, dtype: torch.dtype) -> None:
        self.h = torch.empty(m, HIDDEN, dtype=dtype, device=device)
        self.shards = torch.empty(STEPS, m, cols, dtype=dtype, device=device)
        self.logits = torch.empty(STEPS, m, VOCAB, dtype=dtype, device=device)
        self.tokens = torch.empty(m, STEPS, dtype=torch.int64, device=device)

    def run(self, gather: LogitsGather, w: torch.Tensor, e: torch.Tensor) -> None:
        h = self.h
        for step in range(STEPS):
            self.shards[step].copy_(h @ w)
            logits = gather(self.shards[step])
            self.logits[step].copy_(logits)
            token = logits.argmax(-1)  # the sample right after the gather
            self.tokens[:, step].copy_(token)
            h = e[token]


def _check(chain: _Chain, world: int, what: str) -> None:
    """The expected logits are the ranks' own shards, gathered on the host."""
    for step in range(STEPS):
        shard = chain.shards[step].cpu()
        parts = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(parts, shard)
        expected = torch.cat(parts, 1).to(chain.logits.device)
        assert_bits(chain.logits[step], expected, f"{what} step {step}")
        tokens = expected.argmax(-1)
        assert torch.equal(chain.tokens[:, step], tokens), f"{what} step {step}: tokens"


def _drafter(rank: int, world: int, placement: str, replays: int) -> None:
    device = rank_device(rank, placement)
    dtype, cols = torch.bfloat16, VOCAB // world
    rng = random.Random(11)
    gen = torch.Generator(device=device).manual_seed(5)  # the same weights on every rank
    w_full = torch.randn(HIDDEN, VOCAB, generator=gen, device=device).to(dtype)
    w = w_full[:, rank * cols : (rank + 1) * cols].contiguous()
    e = torch.randn(VOCAB, HIDDEN, generator=gen, device=device).to(dtype)
    target = LogitsGather(
        cols, 32, device, dtype=dtype, graphs=False, timeout_s=60.0, on_timeout="raise"
    )
    draft = LogitsGather(
        cols, max(SIZES), device, dtype=dtype, graphs=True, timeout_s=60.0, on_timeout="raise"
    )
    assert draft.backend == target.backend == "symm_mem"
    ok, message = True, ""
    try:
        profile = _Chain(max(SIZES), cols, device, dtype)  # profile_run's eager propose
        profile.h.copy_(e[: max(SIZES)])
        profile.run(draft, w, e)
        _check(profile, world, "profile")
        chains, graphs = {}, {}
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for m in SIZES:
                chains[m] = _Chain(m, cols, device, dtype)
                chains[m].h.copy_(e[m : 2 * m])
                chains[m].run(draft, w, e)  # warm-up, eager, on the capture stream
                graphs[m] = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graphs[m], stream=side):
                    chains[m].run(draft, w, e)
        for step in range(replays):
            m = rng.choice(SIZES)
            chain = chains[m]
            first = torch.tensor([rng.randrange(VOCAB) for _ in range(m)], device=device)
            chain.h.copy_(e[first])
            chain.logits.fill_(-3.0)
            chain.tokens.fill_(-1)
            delay_random_rank(rng, rank, world)
            graphs[m].replay()
            _check(chain, world, f"replay {step} (m={m})")
            if rng.random() < 0.5:  # the target model's eager gather of the next step
                rows = rng.randint(1, 32)
                shard = torch.randn(rows, cols, device=device).to(dtype)
                out = target(shard)
                parts = [torch.empty_like(shard.cpu()) for _ in range(world)]
                dist.all_gather(parts, shard.cpu())
                assert_bits(out, torch.cat(parts, 1).to(device), f"target after {step}")
            if rng.random() < 0.3:  # a batch size without a graph: eager drafter steps
                eager = _Chain(rng.choice((2, 5, 7)), cols, device, dtype)
                eager.h.copy_(e[first[:1]].expand_as(eager.h))
                eager.run(draft, w, e)
                _check(eager, world, f"eager drafter after {step}")
        draft.check()
        target.check()
    except AssertionError as exc:
        ok, message = False, str(exc)
    all_ranks_ok(ok, message)


@pytest.mark.parametrize("world,placement", placements((2, 4)))
def test_drafter_graph_pattern(world: int, placement: str) -> None:
    run_ranks(_drafter, world, placement, 300, env=placement_env(placement), timeout=900)
