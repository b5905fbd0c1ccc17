"""The fused sampling kernels at tp 2, 4 and 8, ranks emulated in one process (GPU).

Every rank's kernels run on its own stream over its own mailbox copies
(:mod:`scripts.support.emulated`), so one GPU checks the real kernels and exchange at any
tp's geometry, thousands of calls in seconds. Each iteration draws a fresh M,
dtype, temperatures (some 0) and seeds, logits whose adversarial rows (ties at a
top-k cut, one dominant logit over an equal tail, NaN, inf, all -inf) sit at
random rows, and delays a random rank; every rank's answer must equal the
definition on the gathered logits. M spans greedy, sample and logprobs as one launch
(:mod:`logits_gather.sampling.kernels.waiters`, M up to ``single_rows``) and as two.
``LOGITS_GATHER_STRESS_ITERS`` sets the iterations per tp (default 12). Run with
``CUDA_MODULE_LOADING=EAGER`` (the kernels are also loaded before any rank waits:
:meth:`scripts.support.emulated.Ranks.warm`).
"""

from __future__ import annotations

import os
import random

import pytest
import torch

pytest.importorskip("triton")

from scripts.support.emulated import Ranks  # noqa: E402
from tests.support.gpu import adversarial_logits

pytestmark = pytest.mark.gpu

V = 151552
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOP_KS = (1, 2, 3, 20, 50, 64)
TOL = 2e-5


def _full(rng: random.Random, m: int, n: int, world: int, dtype, dev) -> torch.Tensor:
    """Adversarial rows (see tests.support.gpu.adversarial_logits) at random rows, plus rows of
    one value everywhere and rows whose top 65 values are equal."""
    x = adversarial_logits(rng.randrange(2**31), m, n, world, torch.float32, dev)
    x = x[torch.randperm(m, generator=torch.Generator().manual_seed(rng.randrange(2**31)))]
    for i in range(m):
        case = rng.randrange(10)
        if case == 0:
            x[i] = rng.choice([0.0, -1.5, 7.0])
        elif case == 1:
            cols = torch.randperm(n * world, device=dev)[:65]
            x[i, cols] = x[i].max() + 1.0
    return x.to(dtype)


def _check_all(ranks: Ranks, outs: list, want: torch.Tensor, what: str) -> None:
    diverged = ranks.diverged()
    for r, got in enumerate(outs):
        if not torch.equal(got, want):
            rows = (got != want).nonzero().flatten().tolist()
            others = [q for q, o in enumerate(outs) if torch.equal(o, want)]
            raise AssertionError(
                f"{what}: rank {r} differs at rows {rows[:8]} (ranks right: {others}); "
                f"mailbox copies: {diverged or 'all equal'}"
            )
    assert not diverged, f"{what}: {diverged}"


def _logprobs_ok(ranks: Ranks, outs: list, want, what: str) -> None:
    assert not ranks.diverged(), f"{what}: {ranks.diverged()}"
    for r, (lp, top_ids, top_lp) in enumerate(outs):
        tag = f"{what} rank {r}"
        assert torch.equal(top_ids, want.top_ids), tag
        nan = want.logprobs.isnan()
        assert torch.equal(lp.isnan(), nan), tag
        err = (lp[~nan] - want.logprobs[~nan]).abs()
        assert bool((err <= TOL * (1 + want.logprobs[~nan].abs())).all()), tag
        close = (top_lp - want.top_logprobs).abs() <= TOL * (1 + want.top_logprobs.abs())
        assert bool((close | want.top_logprobs.isnan()).all()), tag


def _topp_ok(ranks: Ranks, outs: list, want: torch.Tensor, what: str) -> bool:
    """Top-p and the other cuts (``(tokens, need)``): every rank returns the same tokens and
    flag, and every row is the definition's, rows the rounds left undecided (``need``)
    included: the in-kernel fallback served them. Returns ``need``."""
    assert not ranks.diverged(), f"{what}: {ranks.diverged()}"
    tokens, need = outs[0]
    for r, (got, flag) in enumerate(outs):
        assert torch.equal(got, tokens) and torch.equal(flag, need), f"{what}: rank {r} differs"
    rows = (tokens != want).nonzero().flatten().tolist()
    assert not rows, f"{what}: wrong rows {rows[:8]} (need {bool(need)})"
    return bool(need)


def _cut(f, shard, temp, rows, p, mp, k=None):
    """Top-p's rounds (round 2 always), then the in-kernel fallback: ``(tokens, need)``."""
    out, flags, second, rest = f.topp_rounds(shard, temp, rows, p, mp, k)
    second()
    rest()
    return out, flags[:1]


def calls(ranks: Ranks, rng: random.Random, m: int, dtype: torch.dtype) -> list:
    """``(name, call(fused, rank), want)`` for every fused operation on one fresh batch
    (``want``: the definition on the gathered logits; a ``Logprobs`` for ``top_n=...``)."""
    from logits_gather.sampling import reference

    world, n, dev = ranks.world, ranks.columns, ranks.device
    full = _full(rng, m, n, world, dtype, dev)
    shards = [full[:, r * n : (r + 1) * n] for r in range(world)]
    temp = torch.tensor([rng.choice([0.0, 0.3, 0.8, 1.0, 1.7]) for _ in range(m)], device=dev)
    seed = torch.randint(-(2**63), 2**63 - 1, (m,), device=dev)
    pos = torch.randint(0, 2**31, (m,), device=dev)
    rows = (seed, pos)  # the fused kernels' seeds, positions
    ids = torch.randint(0, V, (m,), device=dev)
    min_p = torch.tensor([rng.choice([0.01, 0.1, 0.5]) for _ in range(m)], device=dev)
    out = [
        ("greedy", lambda f, r: f.greedy(shards[r]), full.argmax(1)),
        ("sample", lambda f, r: f.sample(shards[r], temp, rows),
         reference.sample(full, temp, seed, pos)),
        ("min_p", lambda f, r: f.sample_minp(shards[r], temp, rows, min_p),
         reference.sample(full, temp, seed, pos, min_p=min_p)),
    ]  # fmt: skip
    for k in TOP_KS:
        out.append(
            (f"top_k={k}", lambda f, r, k=k: f.sample_topk(shards[r], temp, rows, k, None, None),
             reference.sample(full, temp, seed, pos, top_k=k))
        )  # fmt: skip
    p64 = torch.tensor([rng.choice([0.9, 1.0, 0.5, 1e-6, 0.99]) for _ in range(m)], device=dev,
                       dtype=torch.float64)  # fmt: skip
    for name, p, mp in (("top_p=0.9", 0.9, None), ("top_p=[M]", p64, None),
                        ("top_p=0.8,min_p", 0.8, min_p)):  # fmt: skip
        pm = p if isinstance(p, torch.Tensor) else torch.full((m,), p, dtype=torch.float64,
                                                               device=dev)  # fmt: skip
        lm = mp
        out.append(
            (name, lambda f, r, pm=pm, lm=lm: f.sample_topp(shards[r], temp, rows, pm, lm),
             reference.sample(full, temp, seed, pos, top_p=pm, min_p=mp))
        )  # fmt: skip
    # A per-row k (any value) with top-p, in top-p's launches (nucleus_k_row); both rounds run.
    kr = torch.tensor([rng.choice([0, 1, 7, 50, 64, 300, V]) for _ in range(m)], device=dev)

    def rows_k(f, r, kr=kr, p=p64, lm=min_p):
        return _cut(f, shards[r], temp, rows, p, lm, kr)

    want = reference.sample(full, temp, seed, pos, top_k=kr, top_p=p64, min_p=min_p)
    out.append(("top_p=[M],top_k=[M],min_p", rows_k, want))
    # A per-row k alone, as the sampler routes it: top-k's launches, then the rest.
    want = reference.sample(full, temp, seed, pos, top_k=kr, min_p=min_p)
    out.append(("top_k=[M],min_p", lambda f, r: f.sample_topk(shards[r], temp, rows, kr, None,
                                                            min_p, plain=True), want))  # fmt: skip
    for name, k, p, mp in (("top_k=20,top_p=0.9", 20, 0.9, None), ("top_k=3,min_p", 3, None, 1),
                           ("top_k=50,top_p=[M],min_p", 50, p64, 1),
                           ("top_k=64,top_p=0.5", 64, 0.5, None),
                           ("top_k=[M],top_p=[M]", "rows", p64, None)):  # fmt: skip
        if k == "rows":  # the fused top-k serves rows with k in 1..64 (topp.sample_rows_k)
            k = torch.tensor([rng.choice([1, 2, 7, 50, 64]) for _ in range(m)], device=dev)
        pm = p if not isinstance(p, float) else torch.full((m,), p, dtype=torch.float64,
                                                           device=dev)  # fmt: skip
        lm = mp = None if mp is None else min_p
        out.append(
            (name, lambda f, r, k=k, pm=pm, lm=lm: f.sample_topk(shards[r], temp, rows, k, pm, lm),
             reference.sample(full, temp, seed, pos, top_k=k, top_p=pm, min_p=mp))
        )  # fmt: skip
    for top_n in (0, 1, 5, 20):
        out.append(
            (f"top_n={top_n}", lambda f, r, n_=top_n: f.logprobs(shards[r], ids, n_),
             reference.logprobs(full, ids, top_n=top_n))
        )  # fmt: skip
    return out


def _iteration(
    ranks: Ranks, rng: random.Random, it: int, m: int | None = None, warm: bool = False
) -> None:
    """One fresh batch through every fused operation, each with a delayed rank (with
    ``warm``: only compiles and loads the kernels, see :meth:`Ranks.warm`)."""
    m, dtype = m or rng.randint(1, ranks.capacity), DTYPES[it % 3]
    where = f"tp={ranks.world} it={it} m={m} {dtype}"
    for name, call, want in calls(ranks, rng, m, dtype):
        if warm:
            ranks.warm(call)
            continue
        try:
            outs = ranks.run(call, (rng.randrange(ranks.world), rng.randrange(0, 200_000)))
        except AssertionError as e:
            raise AssertionError(f"{where} {name}: {e}") from None
        if name.startswith("top_n"):
            _logprobs_ok(ranks, outs, want, f"{where} {name}")
        elif name.startswith("top_p"):
            _topp_ok(ranks, outs, want, f"{where} {name}")
        else:
            _check_all(ranks, outs, want, f"{where} {name}")


@pytest.mark.parametrize("world", [2, 4, 8])
def test_emulated_ranks_match_gathered(world: int) -> None:
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ranks = Ranks(world, V // world, 64, dev)
    rng = random.Random(1000 + world)
    for it in range(len(DTYPES)):  # every kernel and dtype (M, k and n: not specialised)
        small = max(1, min(5, ranks.fused[0].single_rows))
        _iteration(ranks, rng, it, small, warm=True)  # one launch (kernels/waiters.py) for small M,
        _iteration(ranks, rng, it, ranks.capacity, warm=True)  # two above single_rows
    assert 0 < ranks.fused[0].single_rows < ranks.capacity, "both paths must be exercised"
    for it in range(int(os.environ.get("LOGITS_GATHER_STRESS_ITERS", "12"))):
        _iteration(ranks, rng, it)


@pytest.mark.parametrize("world,m", [(2, 24), (4, 24), (2, 2), (4, 3)])
def test_rest_serves_rows_the_rounds_leave(world: int, m: int) -> None:
    """Flat rows (a nucleus of thousands), a per-row k of hundreds to thousands and min-p:
    top-p's rounds leave rows undecided, and the in-kernel fallback (``kernels.topp_exact``,
    teams of several programs per rank spinning on each other) must give every rank the
    definition's token in every row. M=2 and 3 take the wider teams of small calls
    (``plans.rest_team``); their rows are all nearly flat, so every call needs the fallback."""
    from logits_gather.sampling import reference
    from logits_gather.sampling.fused.plans import rest_team

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ranks = Ranks(world, V // world, m, dev)
    n = V // world
    f0 = ranks.fused[0]
    team = f0.rest_grid(torch.empty(m, n, device=dev))[1]
    grid_full = rest_team(n, 10**6, f0.rest_most(torch.empty(1, n, device=dev)))[1]
    if m < 8:  # what this case is for: a team wider than a full grid's
        assert team > grid_full, (m, team, grid_full)
    rng = random.Random(50 + world + m)
    spreads = [0.05, 0.3, 1.0, 3.0] if m >= 8 else [0.05, 0.3]
    tops = [0.3, 0.9, 0.99, 1.0] if m >= 8 else [0.9, 0.99]
    needed = 0
    for it in range(6):
        dtype = DTYPES[it % 3]
        spread = torch.tensor([rng.choice(spreads) for _ in range(m)], device=dev)
        full = (torch.randn(m, V, device=dev) * spread[:, None]).to(dtype)
        temp = torch.tensor([rng.choice([0.5, 0.8, 1.0, 1.3]) for _ in range(m)], device=dev)
        seed = torch.randint(-(2**63), 2**63 - 1, (m,), device=dev)
        pos = torch.randint(0, 2**31, (m,), device=dev)
        rows = (seed, pos)  # the fused kernels' seeds, positions
        p = torch.tensor([rng.choice(tops) for _ in range(m)], device=dev, dtype=torch.float64)
        k = torch.tensor([rng.choice([0, 5, 100, 1000, 30000, V]) for _ in range(m)], device=dev)
        mp = torch.full((m,), 0.02, device=dev) if it % 2 else None
        shards = [full[:, r * n : (r + 1) * n] for r in range(world)]
        for kk in (None, k):

            def call(f, r, kk=kk, shards=shards, temp=temp, rows=rows, p=p, mp=mp):
                return _cut(f, shards[r], temp, rows, p, mp, kk)

            ranks.warm(call)  # each dtype and filter set compiles its own kernels
            outs = ranks.run(call, (rng.randrange(world), rng.randrange(0, 200_000)))
            want = reference.sample(full, temp, seed, pos, top_k=kk, top_p=p, min_p=mp)
            needed += _topp_ok(ranks, outs, want, f"tp={world} it={it} {dtype} k={kk is not None}")
    assert needed >= 6, f"the rounds left rows undecided in only {needed} of 12 calls"


def test_topp_second_round_decides_a_dense_split() -> None:
    """One split dense near the top hides round 1's cut (every split's candidates stop
    at the largest value some split left out); round 2 (``topp.again_*``) must then decide
    the row, exactly, on every rank, without the fallback."""
    from logits_gather.sampling import reference

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    world, m = 2, 4
    ranks = Ranks(world, V // world, 8, dev)
    rng = random.Random(7)
    full = (torch.randn(m, V, device=dev) * 3).to(torch.bfloat16)
    full[1] = -20.0
    full[1, :70] = (10.0 - 0.49 * torch.arange(70, device=dev) / 70).to(torch.bfloat16)
    for start in range(2048, V, 2048):  # 40 elements in every other split, just below
        full[1, start : start + 40] = 9.95
    shards = [full[:, r * (V // world) : (r + 1) * (V // world)] for r in range(world)]
    temp = torch.tensor([0.8, 1.0, 0.8, 1.3], device=dev)
    seed = torch.randint(-(2**63), 2**63 - 1, (m,), device=dev)
    pos = torch.randint(0, 2**31, (m,), device=dev)
    rows = (seed, pos)  # the fused kernels' seeds, positions
    p = torch.full((m,), 0.5, dtype=torch.float64, device=dev)
    call = lambda f, r: f.sample_topp(shards[r], temp, rows, p, None, exact=False)  # noqa: E731
    ranks.warm(call)
    want = reference.sample(full, temp, seed, pos, top_p=p)
    for _ in range(3):
        outs = ranks.run(call, (rng.randrange(world), rng.randrange(0, 200_000)))
        again = ranks.fused[0].spilled != 0x7FFFFFFF
        assert bool(again[1]), "round 1 decided the dense-split row: the test lost its case"
        assert not bool(outs[0][1]), "round 2 left a row undecided"
        _topp_ok(ranks, outs, want, "dense split")
