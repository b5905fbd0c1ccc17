"""The fused sampling kernels against vLLM 0.33's own V2 sampler kernels on one GPU.

vLLM's files come from the packed wheel files on ``PYTHONPATH`` (docs/gpu-testing.md);
skipped where ``vllm`` does not import or there is no GPU.

- Noise and scores bit for bit: the kernels' ``x / T + noise`` against vLLM's own
  ``apply_temperature`` followed by its ``murmur3_uniform32`` and ``_log1p_neg_stable``
  noise, added as ``gumbel_sample(apply_temperature=False)`` adds it (how vLLM's V2
  ``Sampler`` composes them: :mod:`tests.sampling.vllm_scores`), over 64 rows of V=151552
  columns, T = 0 and 1 included, negative and 64-bit seeds, large positions.
- Tokens: greedy, temperature and min-p at world size 1 and at tp=2 with both ranks on
  one GPU equal ``apply_temperature`` + ``apply_min_p`` + ``gumbel_sample`` on the
  gathered logits, row for row, in bfloat16, float16 and float32 at several M.
"""

from __future__ import annotations

import random

import pytest
import torch

from scripts.support.dist import run_ranks
from scripts.support.placement import rank_device
from tests.sampling.step import fused_env
from tests.support.gpu import placements

pytestmark = pytest.mark.gpu
V = 151552
TEMPS = (0.0, 1.0, 0.7, 1.3, 0.05, 2.0)
MIN_PS = (0.0, 0.05, 0.3)
ONE_GPU = [c for c in placements((2,)) if c.id == "tp2-one-gpu"]


def _vllm():
    try:
        from vllm.v1.worker.gpu.sample import gumbel, min_p
    except ImportError as err:  # pragma: no cover - depends on the machine
        pytest.skip(f"vLLM's kernels do not import: {err}")
    return gumbel, min_p


def _vllm_tokens(logits, temp, seeds, pos, mp=None) -> torch.Tensor:
    gumbel, min_p = _vllm()
    m = logits.shape[0]
    idx = torch.arange(m, dtype=torch.int32, device=logits.device)
    x = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    gumbel.apply_temperature(x, idx, temp)
    if mp is not None:
        min_p.apply_min_p(x, idx, mp)
    return gumbel.gumbel_sample(x, idx, temp, seeds, pos, apply_temperature=False,
                                is_drafting=False)  # fmt: skip


def test_scores_equal_vllm_bits() -> None:
    import triton

    from tests.sampling import noise_kernels as sampling_kernels

    _vllm()
    from tests.sampling.vllm_scores import scores

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    gen = torch.Generator(device=dev).manual_seed(random.randrange(2**31))
    m, block = 64, 1024
    for dtype in (torch.bfloat16, torch.float32):
        x = (torch.randn(m, V, device=dev, generator=gen) * 4).to(dtype)
        t = torch.rand(m, device=dev, generator=gen) * 7 + 1e-3
        t[:4] = torch.tensor([1.0, 1e-3, 7.0, 0.0])
        seed = torch.randint(-(2**63), 2**63 - 1, (m,), device=dev, generator=gen)
        pos = torch.randint(0, 2**31, (m,), device=dev, generator=gen)
        grid = (m, triton.cdiv(V, block))
        want = scores(x, t, seed, pos)
        got = torch.full_like(want, float("nan"))
        sampling_kernels.noise_kernel[grid](seed, pos, t, x, got, V, BLOCK=block)
        diff = got.view(torch.int32) != want.view(torch.int32)
        assert int(diff.sum()) == 0, (
            f"{dtype}: {int(diff.sum())} of {got.numel()} differ, first at "
            f"{diff.nonzero()[:4].tolist()}"
        )


def _tokens(rank: int, world: int, seed: int, placement: str) -> int:
    from logits_gather import sampling

    dev, n = rank_device(rank, placement), V // world
    sampler = sampling.VocabParallelSampler(n, 256, device=dev, backend="symm_mem")
    assert sampler.fused is not None, "the fused path is not in use"
    gen = torch.Generator(device=dev).manual_seed(seed)  # the same inputs on every rank
    rows = 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for m in (1, 37, 256):
            full = (torch.randn(m, V, generator=gen, device=dev) * 4).to(dtype)
            full[::5, ::9973] = full[::5].amax(1, keepdim=True) + 1  # tied maxima
            shard = full[:, rank * n : (rank + 1) * n].contiguous()
            temp = torch.tensor(TEMPS, device=dev)[torch.arange(m, device=dev) % len(TEMPS)]
            seeds = torch.randint(-(2**63), 2**63 - 1, (m,), generator=gen, device=dev)
            pos = torch.randint(0, 2**31, (m,), generator=gen, device=dev)
            mp = torch.tensor(MIN_PS, device=dev)[torch.arange(m, device=dev) % len(MIN_PS)]
            zero = torch.zeros(m, device=dev)
            where = f"{dtype} M={m} rank {rank}"
            for what, got, want in (
                ("greedy", sampler.greedy(shard), _vllm_tokens(full, zero, seeds, pos)),
                ("temperature", sampler.sample(shard, temp, seeds, pos),
                 _vllm_tokens(full, temp, seeds, pos)),
                ("min_p", sampler.sample(shard, temp, seeds, pos, min_p=mp),
                 _vllm_tokens(full, temp, seeds, pos, mp)),
                ("min_p=0.1", sampler.sample(shard, temp, seeds, pos, min_p=0.1),
                 _vllm_tokens(full, temp, seeds, pos, torch.full_like(mp, 0.1))),
            ):  # fmt: skip
                bad = (got != want).nonzero().flatten().tolist()
                assert not bad, f"{where} {what}: rows {bad[:8]} differ from vLLM's"
                rows += m
    torch.cuda.synchronize()
    sampler.check()
    return rows


def test_tokens_equal_vllm_world_size_1() -> None:
    _vllm()
    results = run_ranks(_tokens, 1, random.randrange(2**31), "per-gpu",
                        env=fused_env("per-gpu"), timeout=900)  # fmt: skip
    assert results == [4 * 3 * (1 + 37 + 256)]


@pytest.mark.parametrize("world_size,placement", ONE_GPU)
def test_tokens_equal_vllm_two_ranks_one_gpu(world_size: int, placement: str) -> None:
    _vllm()
    results = run_ranks(_tokens, world_size, random.randrange(2**31), placement,
                        env=fused_env(placement), timeout=900)  # fmt: skip
    assert results == [4 * 3 * (1 + 37 + 256)] * world_size
