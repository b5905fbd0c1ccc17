"""One decode step of every sampling operation on fixed buffers, for the GPU tests that
replay it in a CUDA graph or run it call by call (:class:`Step`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import SPILL_TOP_P, adversarial_logits, spill_logits

M = 37
TOL = 2e-5  # |ours - torch.log_softmax(fp32)| <= TOL * (1 + |ref|)


def fused_env(placement: str) -> dict[str, str]:
    """The environment of ranks at ``placement`` (the fused path is the default)."""
    return placement_env(placement)


def close(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), f"{where}: NaN pattern differs"
    err = (got[~nan] - want[~nan]).abs().nan_to_num(0.0)
    assert bool((err <= TOL * (1 + want[~nan].abs())).all()), f"{where}: max error {err.max()}"


class Step:
    """Ten operations of one sampler on ``M`` rows of ``n`` columns per rank, bfloat16:
    greedy, plain, top-k, per-row filters, top-p, min-p, logprobs, top-p on peaked
    logits (odd fills: rows the candidates cannot decide, so the exact fallback runs),
    top-k with top-p and min-p, and last a top-p call that only round 2 decides
    (:func:`tests.support.gpu.spill_logits`). :meth:`fill` writes fresh inputs in place, so a
    captured graph sees them; :meth:`check` compares a step's results with
    :mod:`logits_gather.sampling.reference` on the gathered logits."""

    def __init__(self, rank: int, world: int, seed: int, placement: str, n: int) -> None:
        from logits_gather import sampling

        self.rank, self.world, self.seed, self.n = rank, world, seed, n
        dev = self.dev = rank_device(rank, placement)
        self.sampler = sampling.VocabParallelSampler(
            n, 64, device=dev, backend="symm_mem", check_values=False
        )
        self.shard = torch.empty(M, n, dtype=torch.bfloat16, device=dev)
        self.peaked = torch.empty(M, n, dtype=torch.bfloat16, device=dev)
        self.temp = torch.empty(M, device=dev)
        self.seeds = torch.empty(M, dtype=torch.int64, device=dev)
        self.pos = torch.empty(M, dtype=torch.int64, device=dev)
        self.ids = torch.empty(M, dtype=torch.int64, device=dev)
        self.top_k = torch.empty(M, dtype=torch.int64, device=dev)
        self.top_p = torch.empty(M, device=dev)
        self.min_p = torch.empty(M, device=dev)
        self.ones = torch.ones(M, device=dev)
        self.spill = spill_logits(M, n, world, torch.bfloat16, dev)  # round 2 decides
        self.spilled = self.spill[:, rank * n : (rank + 1) * n].contiguous()
        self.full = self.sharp = None

    def fill(self, i: int) -> None:
        """Fresh inputs. ``peaked``: the logits times 8, so top-p's candidates decide most
        rows; on odd ``i`` every other row is one value throughout, which they cannot
        decide."""
        dev, n, r = self.dev, self.n, self.rank
        full = adversarial_logits(self.seed + i, M, n, self.world, torch.bfloat16, dev)
        gen = torch.Generator(device=dev).manual_seed(self.seed + 1000 + i)
        self.shard.copy_(full[:, r * n : (r + 1) * n])
        sharp = full.float().mul(8).nan_to_num(0.0, 0.0, 0.0)
        if i % 2:
            sharp[1::2] = 1.0
        sharp = sharp.to(torch.bfloat16)
        self.peaked.copy_(sharp[:, r * n : (r + 1) * n])
        u = torch.rand(M, device=dev, generator=gen)
        self.temp.copy_(torch.where(u < 0.2, 0.0, u * 2))  # about a fifth greedy rows
        self.seeds.copy_(torch.randint(-(2**62), 2**62, (M,), device=dev, generator=gen))
        self.pos.copy_(torch.randint(0, 2**31, (M,), device=dev, generator=gen))
        self.ids.copy_(torch.randint(0, n * self.world, (M,), device=dev, generator=gen))
        self.top_k.copy_(torch.randint(0, 80, (M,), device=dev, generator=gen))
        self.top_p.copy_(torch.rand(M, device=dev, generator=gen).clamp_(min=0.05))
        self.min_p.copy_(torch.rand(M, device=dev, generator=gen) * 0.2)
        self.full, self.sharp = full, sharp

    def calls(self) -> list[Callable[[], Any]]:
        s, x, t, seeds = self.sampler, self.shard, self.temp, self.seeds
        pos = self.pos
        k, p, mp = self.top_k, self.top_p, self.min_p
        return [
            lambda: s.greedy(x),
            lambda: s.sample(x, t, seeds, pos),
            lambda: s.sample(x, t, seeds, pos, top_k=20),
            lambda: s.sample(x, t, seeds, pos, top_k=k, top_p=p, min_p=mp),
            lambda: s.sample(x, t, seeds, pos, top_p=0.9),
            lambda: s.sample(x, t, seeds, pos, min_p=mp),
            lambda: s.logprobs(x, self.ids, top_n=5),
            lambda: s.sample(self.peaked, t, seeds, pos, top_p=p, min_p=mp),
            lambda: s.sample(x, t, seeds, pos, top_k=40, top_p=p, min_p=mp),
            lambda: s.sample(self.spilled, self.ones, seeds, pos, top_p=SPILL_TOP_P),  # last top-p
        ]

    def __call__(self) -> tuple:
        return tuple(call() for call in self.calls())

    def check(self, out: tuple, where: str, captured: bool = False) -> None:
        """``captured``: ``out`` came from a graph replay, so the top-p flags that the
        sampler keeps (its last eager call's) are not this step's."""
        from logits_gather.sampling import reference

        full, sharp, t, seeds = self.full, self.sharp, self.temp, self.seeds
        pos = self.pos
        k, p, mp = self.top_k, self.top_p, self.min_p
        g, s, s20, sf, sp, smin, lp, speaked, skp, sspill = out
        want = reference.sample(self.spill, self.ones, seeds, pos, top_p=SPILL_TOP_P)
        assert torch.equal(sspill, want), f"{where} top_p, round 2"
        fused = self.sampler.fused
        if not captured:
            flags = fused.topp_flags.tolist()
            lam = sorted(set(fused.spilled.tolist()))  # one level: every row alike
            assert flags == [False, True], f"{where} round 2: (need, more) = {flags}, lam {lam}"
        want = reference.sample(full, t, seeds, pos, top_k=40, top_p=p, min_p=mp)
        assert torch.equal(skp, want), f"{where} top_k=40 with top_p and min_p"
        want = reference.sample(sharp, t, seeds, pos, top_p=p, min_p=mp)
        assert torch.equal(speaked, want), f"{where} top_p (peaked, odd: fallback rows)"
        assert torch.equal(g, full.argmax(1)), where
        assert torch.equal(s, reference.sample(full, t, seeds, pos)), where
        assert torch.equal(s20, reference.sample(full, t, seeds, pos, top_k=20)), where
        want = reference.sample(full, t, seeds, pos, top_k=k, top_p=p, min_p=mp)
        assert torch.equal(sf, want), f"{where} filters"
        assert torch.equal(sp, reference.sample(full, t, seeds, pos, top_p=0.9)), where
        assert torch.equal(smin, reference.sample(full, t, seeds, pos, min_p=mp)), f"{where} min_p"
        want = reference.logprobs(full, self.ids, top_n=5)
        close(lp.logprobs, want.logprobs, where)
        assert torch.equal(lp.top_ids, want.top_ids), where
