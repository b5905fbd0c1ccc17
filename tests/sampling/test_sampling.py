"""Vocab-parallel greedy / sample / logprobs vs the same operations on gathered logits (gloo).

Every rank builds the same full logits from a shared seed and keeps its slice,
so the reference needs no communication. The vocabulary is fixed (V = 120) and
split over 1..4 ranks, so the test also compares the sampled tokens across tp.
"""

from __future__ import annotations

import random

import pytest
import torch

from scripts.support.dist import run_ranks

V = 120
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOP_KS = (None, 0, 1, 7, 31, 64, 65, 119, 120)
TOL = 2e-5  # |ours - torch.log_softmax(fp32)| <= TOL * (1 + |ref|)
EXACT_TOL = 1e-6  # |ours - log_softmax in fp64| <= EXACT_TOL * (1 + |ref|)
NAN, INF = float("nan"), float("inf")


# Shard boundaries for 2, 3 and 4 ranks; the logits must not depend on the world size.
EDGES = sorted(
    {0, V - 1} | {b * n + d for n in (30, 40, 60) for b in range(1, V // n) for d in (-1, 0)}
)


def make_logits(gen: torch.Generator, m: int, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """Adversarial [m, V] logits, the same on every rank and world size for the same
    generator state."""
    if kind == "random":
        x = torch.randn(m, V, generator=gen) * 3
    else:  # few distinct values: ties everywhere, maxima on shard boundaries
        x = torch.randint(-3, 3, (m, V), generator=gen).float()
        for i in range(m):  # the same maximum at 1..3 shard edges
            hot = EDGES[i % len(EDGES) :]
            x[i, hot[: 1 + i % 3]] = 9.0
    if kind == "special":
        for i in range(m):
            pick = torch.randint(0, V, (3,), generator=gen).tolist()
            case = i % 7
            if case == 0:
                x[i] = -INF
            elif case == 1:
                x[i, pick] = INF
            elif case == 2:
                x[i, pick[0]] = NAN
            elif case == 3:
                x[i, pick[:2]] = -NAN  # negative-sign NaNs
                x[i, pick[2]] = NAN
            elif case == 4:
                x[i, pick] = -INF
            elif case == 5:
                x[i] = -INF
                x[i, pick[0]] = 0.0
                x[i, pick[1]] = -0.0
    return x.to(dtype)


def _expect_error(errors: list[str], exc: type, needle: str, fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert needle in str(e), f"{needle!r} not in {e!r}"
        errors.append(f"{type(e).__name__}: {e}")
        return
    raise AssertionError(f"{fn.__name__}{args[1:]} did not raise {exc.__name__}")


def _bad_inputs(rank: int, n: int, sampling) -> list[str]:
    x = torch.randn(4, n)
    t, s, ids = torch.ones(4), torch.arange(4), torch.zeros(4, dtype=torch.long)
    errors: list[str] = []
    _expect_error(errors, TypeError, "shard must be", sampling.greedy, [[1.0]])
    _expect_error(errors, TypeError, "shard.dtype", sampling.greedy, x.double())
    _expect_error(errors, ValueError, "2-D", sampling.greedy, x[0])
    _expect_error(errors, ValueError, "length M=4", sampling.sample, x, torch.ones(3), s)
    _expect_error(errors, ValueError, "length M=4", sampling.sample, x, t, torch.arange(5))
    _expect_error(errors, TypeError, "integer dtype", sampling.sample, x, t, s.float())
    # a stray positional argument is taken as positions, and rejected as such
    _expect_error(
        errors, TypeError, "positions must be a torch.Tensor of length M=4, got int 50 "
        "(top_k, top_p and min_p are keyword-only)", sampling.sample, x, t, s, 50
    )  # fmt: skip
    _expect_error(errors, ValueError, "positions", sampling.sample, x, t, s, torch.arange(3))
    _expect_error(errors, TypeError, "integer dtype", sampling.sample, x, t, s, t)
    _expect_error(errors, TypeError, "positional", sampling.logprobs, x, ids, 5)
    _expect_error(errors, TypeError, "group must be a ProcessGroup or None, got str 'world'",
                  sampling.greedy, x, group="world")  # fmt: skip
    _expect_error(errors, TypeError, "floating dtype", sampling.sample, x, s, s)
    _expect_error(
        errors,
        ValueError,
        "got -0.5 at row 2",
        sampling.sample,
        x,
        torch.tensor([1, 0, -0.5, 1]),
        s,
    )
    _expect_error(
        errors, ValueError, "got nan", sampling.sample, x, torch.tensor([1, NAN, 1, 1]), s
    )
    _expect_error(
        errors, ValueError, f"top_k must be in 0..{V}", sampling.sample, x, t, s, top_k=-1
    )
    _expect_error(errors, ValueError, f"got {V + 1}", sampling.sample, x, t, s, top_k=V + 1)
    _expect_error(
        errors, TypeError, "top_k must be None, an int", sampling.sample, x, t, s, top_k=2.0
    )
    _expect_error(errors, TypeError, "integer dtype", sampling.sample, x, t, s, top_k=t)
    _expect_error(
        errors,
        ValueError,
        "got -3 at row 1",
        sampling.sample,
        x,
        t,
        s,
        top_k=torch.tensor([0, -3, 5, 1]),
    )
    _expect_error(
        errors, ValueError, "top_p must be in (0, 1], got 0", sampling.sample, x, t, s, top_p=0
    )
    _expect_error(
        errors, ValueError, "top_p must be in (0, 1], got 1.5", sampling.sample, x, t, s, top_p=1.5
    )
    _expect_error(
        errors,
        ValueError,
        "got 0.0 at row 3",
        sampling.sample,
        x,
        t,
        s,
        top_p=torch.tensor([1.0, 0.5, 0.9, 0.0]),
    )
    _expect_error(
        errors, TypeError, "top_p must be None, a float", sampling.sample, x, t, s, top_p="0.9"
    )
    _expect_error(
        errors,
        ValueError,
        "min_p must be in [0, 1], got -0.1",
        sampling.sample,
        x,
        t,
        s,
        min_p=-0.1,
    )
    _expect_error(
        errors,
        ValueError,
        "got nan at row 0",
        sampling.sample,
        x,
        t,
        s,
        min_p=torch.tensor([NAN, 0.5, 0.9, 0.0]),
    )
    _expect_error(errors, ValueError, "length M=4", sampling.sample, x, t, s, min_p=torch.zeros(3))
    _expect_error(
        errors, ValueError, "top_n must be in 0..20, got 21", sampling.logprobs, x, ids, top_n=21
    )
    _expect_error(
        errors,
        ValueError,
        f"got {V} at row 1",
        sampling.logprobs,
        x,
        torch.tensor([0, V, 1, 2]),
        top_n=0,
    )
    _expect_error(
        errors, ValueError, "got -1 at row 0", sampling.logprobs, x, torch.tensor([-1, 0, 1, 2])
    )
    _expect_error(errors, ValueError, "length M=4", sampling.logprobs, x, ids[:2])
    sampler = sampling.VocabParallelSampler(n, 4, backend="torch.distributed")
    _expect_error(errors, ValueError, "capacity=4, got 5", sampler.greedy, torch.randn(5, n))
    _expect_error(
        errors, ValueError, f"columns={n}, got {n + 1}", sampler.greedy, torch.randn(2, n + 1)
    )
    return errors


def _check(rank: int, world: int, seed: int) -> dict:
    from logits_gather import sampling
    from logits_gather.sampling import reference

    n = V // world
    explicit = sampling.VocabParallelSampler(n, 48, backend="torch.distributed")
    tokens: dict[str, list[int]] = {}
    calls = 0
    # fp16 only at tp <= 2: tp 3 and 4 are four processes on CI's few cores.
    for dtype in DTYPES if world <= 2 else (torch.bfloat16, torch.float32):
        for j, kind in enumerate(("random", "ties", "special")):
            # Data per (dtype, kind), so tp runs that skip fp16 still see the same logits.
            gen = torch.Generator().manual_seed(seed * 16 + 4 * DTYPES.index(dtype) + j)
            drawn = tokens.setdefault(f"{dtype} {kind}", [])
            m = int(torch.randint(1, 40, (1,), generator=gen))
            full = make_logits(gen, m, kind, dtype)
            shard = full[:, rank * n : (rank + 1) * n].contiguous()
            where = f"{dtype} {kind} m={m}"
            assert torch.equal(sampling.greedy(shard), torch.argmax(full, 1)), where
            assert torch.equal(explicit.greedy(shard), torch.argmax(full, 1)), where
            temp = torch.tensor([0.0, 0.3, 1.0, 2.5])[torch.randint(0, 4, (m,), generator=gen)]
            seeds = torch.randint(-(2**62), 2**62, (m,), generator=gen)
            pos = torch.randint(0, 2**31, (m,), generator=gen)
            sweep = dtype == torch.bfloat16 and kind == "ties"
            for k in TOP_KS + (_tie_boundaries(full) if sweep else ()):
                got = sampling.sample(shard, temp, seeds, top_k=k)
                want = reference.sample(full, temp, seeds, top_k=k)
                assert torch.equal(got, want), f"{where} top_k={k}: {got} != {want}"
                drawn += got.tolist()
                calls += 1
            if sweep:
                _check_threshold(explicit, full, shard, where)
            got = explicit.sample(shard, temp.double(), seeds.int(), pos.int(), top_k=5)
            want = reference.sample(full, temp, seeds.int(), pos, top_k=5)
            assert torch.equal(got, want), where
            # The filter path costs up to 10 exchanges a call: every kind in bf16, one in fp32.
            filtered = dtype == torch.bfloat16 or (
                dtype == torch.float32 and kind == "ties" and world <= 2
            )
            for i, f in enumerate(_filters(gen, m, full) if filtered else []):
                if world > 2 and i not in (3, 6, 7):  # tp 3, 4: the adversarial ones
                    continue
                got = sampling.sample(shard, temp, seeds, pos, **f)
                want = reference.sample(full, temp, seeds, pos, **f)
                assert torch.equal(got, want), f"{where} {f}: {got} != {want}"
                tokens[f"{dtype} {kind} filter {i}"] = got.tolist()
                calls += 1
            ids = torch.randint(0, V, (m,), generator=gen)
            for top_n in (0, 1, 20):
                got = sampling.logprobs(shard, ids, top_n=top_n)
                ref = torch.log_softmax(full.float(), 1)
                exact = torch.log_softmax(full.double(), 1)
                want = reference.logprobs(full, ids, top_n)
                _close(got.logprobs, ref.gather(1, ids[:, None])[:, 0], where)
                _close(got.logprobs, exact.gather(1, ids[:, None])[:, 0], where, EXACT_TOL)
                assert torch.equal(got.top_ids, want.top_ids), f"{where} top_n={top_n}"
                _close(got.top_logprobs, want.top_logprobs, where)
                _close(got.top_logprobs, exact.gather(1, got.top_ids), where, EXACT_TOL)
            calls += 4
    assert calls >= 6
    return {
        "tokens": tokens,
        "errors": _bad_inputs(rank, n, sampling),
        "after_errors": sampling.greedy(torch.full((2, n), float(rank))).tolist(),
    }


def _filters(gen: torch.Generator, m: int, full: torch.Tensor) -> list[dict]:
    """Scalar and per-row top_k / top_p / min_p, mixed with their off values, plus top-p
    values that put the cut exactly at the end of a run of equal logits."""

    def col(values):
        return torch.tensor(values)[torch.randint(0, len(values), (m,), generator=gen)]

    mixed = dict(
        top_k=col([0, 1, 3, 40, 64, 65, V]),
        top_p=col([1.0, 0.2, 0.7, 0.95]),
        min_p=col([0.0, 0.0, 0.1, 0.6]),
    )
    return [
        dict(top_p=0.9),
        dict(min_p=0.05),
        dict(top_p=0.6, top_k=10),
        dict(top_p=0.8, min_p=0.2),
        dict(top_k=col([0, 2, 9, 64, 100])),
        dict(top_p=col([1.0, 1e-9, 0.5, 0.999999])),
        mixed,
        dict(top_p=_run_end_p(full.float())),
    ]


def _run_end_p(x: torch.Tensor) -> torch.Tensor:
    """Per row, a top_p whose threshold equals the mass of the top run(s) of equal values
    (at T=1), so the cut lands exactly on a run's last element."""
    s = x.nan_to_num(0.0, 0.0, 0.0)
    smax = s.amax(1, keepdim=True)
    q = torch.floor(torch.exp(s - smax) * 2.0**40).long()
    top = s >= smax
    frac = q.where(top, 0).sum(1).double() / q.sum(1).double()
    return frac.clamp(1e-6, 1.0).float()


def _tie_boundaries(full: torch.Tensor) -> tuple[int, ...]:
    """k at which the k-th largest of row 0 ends a run of equal values, and k +- 1."""
    row = full[0].float()
    values = row.unique()
    if row.isnan().any() or len(values) > 12:
        return ()
    ends = {int((row >= v).sum()) for v in values}
    return tuple(sorted(k + d for k in ends for d in (-1, 0, 1) if 1 <= k + d <= V))


def _check_threshold(sampler, full: torch.Tensor, shard: torch.Tensor, where: str) -> None:
    """The radix select's k-th largest equals topk's, for k at tie boundaries."""
    from logits_gather.sampling.exact import filters as select

    m = shard.shape[0]
    ex = sampler.exchange_for(select.RADIX_WIDTH, m)
    keys, ff = select.ordered_keys(shard.float()), full.float()
    ok = ~ff.isnan().any(1)
    for k in _tie_boundaries(full) + (1, V):
        target = torch.full((m, 1), k, dtype=torch.int64)
        got = select.threshold(keys, None, target, lambda p: ex.send(m), ex.payload[:m])[:, 0]
        want = select.ordered_keys(ff.topk(k, 1).values[:, -1])
        assert torch.equal(got[ok], want[ok]), f"{where} k-th largest key, k={k}"


def _close(got: torch.Tensor, want: torch.Tensor, where: str, tol: float = TOL) -> None:
    assert got.dtype == torch.float32 and got.shape == want.shape, where
    got, want = got.double(), want.double()
    same_nan = torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    err = (got[finite] - want[finite]).abs()
    bound = tol * (1 + want[finite].abs())
    inf_ok = torch.equal(got[finite].isinf(), want[finite].isinf())
    ok = same_nan and inf_ok and bool((err.nan_to_num(0.0) <= bound).all())
    assert ok, f"{where}: NaN pattern {same_nan}, max error {err.max() if err.numel() else 0}"


SEED = random.randrange(2**31)
_tokens_by_world: dict[int, dict[str, list[int]]] = {}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_equivalence(world_size: int) -> None:
    """Exact greedy and sample, logprobs within TOL, identical errors on every rank."""
    results = run_ranks(_check, world_size, SEED)
    errors = results[0]["errors"]
    assert len(errors) == 32
    for r, res in enumerate(results):
        assert res["errors"] == errors, f"rank {r} raised differently"
        assert res["after_errors"] == [(world_size - 1) * (V // world_size)] * 2
        assert res["tokens"] == results[0]["tokens"], f"rank {r} sampled differently"
    # Same logits and seeds at every world size (SEED is per session): same tokens.
    _tokens_by_world[world_size] = results[0]["tokens"]
    for other, tokens in _tokens_by_world.items():
        for case in tokens.keys() & results[0]["tokens"].keys():
            same = tokens[case] == results[0]["tokens"][case]
            assert same, f"{case}: tp={other} != tp={world_size}"


def test_reference_tie_rules() -> None:
    """The definition's tie rules on hand-made rows (no communication)."""
    from logits_gather.sampling import reference

    r = 400
    seeds = torch.arange(r) * 7919
    t = torch.ones(r)
    x = torch.tensor([3.0, 1.0, 3.0, 0.0, 3.0, -1.0, 2.0, 2.0]).expand(r, 8)
    # top-p cut inside the run of three 3.0s keeps the whole run, and nothing else.
    got = reference.sample(x, t, seeds, top_p=0.05)
    assert set(got.tolist()) == {0, 2, 4}
    # top-k = 2 cuts inside the same run: all three stay.
    assert set(reference.sample(x, t, seeds, top_k=2).tolist()) == {0, 2, 4}
    # top-k = 4 reaches the 2.0s: both stay (5 tokens).
    assert set(reference.sample(x, t, seeds, top_k=4).tolist()) == {0, 2, 4, 6, 7}
    # min-p = 1 keeps exactly the maxima; min-p = 0, top-p = 1 and top-k = 0 are "off".
    assert set(reference.sample(x, t, seeds, min_p=1.0).tolist()) == {0, 2, 4}
    plain = reference.sample(x, t, seeds)
    for off in (dict(min_p=0.0), dict(top_p=1.0), dict(top_k=0), dict(top_k=8)):
        assert torch.equal(reference.sample(x, t, seeds, **off), plain), off
    # Temperature 0 and non-finite rows give argmax(x) (the first maximum / NaN).
    y = x.clone()
    y[1, 3] = float("nan")
    y[2] = float("-inf")
    got = reference.sample(y[:3], torch.tensor([0.0, 1.0, 1.0]), seeds[:3], top_p=0.5)
    assert got.tolist() == [0, 3, 0]


def test_scores_are_x_divided_by_t() -> None:
    """The definition's scores, as vLLM's temperature kernel: ``x / T`` in IEEE fp32
    (numpy's float32 division as the independent side), ``x`` itself at ``T = 0`` and
    ``T = 1``; the caller's logits stay untouched, fp32 ones included."""
    import numpy as np

    from logits_gather.sampling import reference

    gen = torch.Generator().manual_seed(random.randrange(2**31))
    for dtype in (torch.bfloat16, torch.float32):
        x = (torch.randn(5, 4096, generator=gen) * 7).to(dtype)
        before = x.clone()
        t = torch.tensor([0.7, 0.0, 1.0, 3.3, 0.05])
        got = reference.scaled(x, t[:, None]).numpy().view(np.int32)
        assert torch.equal(x, before), dtype
        tn = np.where((t.numpy() == 0) | (t.numpy() == 1), np.float32(1.0), t.numpy())
        want = (x.float().numpy() / tn.astype(np.float32)[:, None]).astype(np.float32)
        assert np.array_equal(got, want.view(np.int32)), dtype
        for row in (1, 2):  # T = 0 and 1: s = x
            assert np.array_equal(got[row], x[row].float().numpy().view(np.int32)), row


def test_positions_key_the_noise() -> None:
    """The noise is keyed by (seed, position, token id): another position gives another
    draw, the same position the same one; ``positions=None`` is position 0."""
    from logits_gather.sampling import reference

    r = 256
    x = torch.zeros(r, 64)
    t = torch.ones(r)
    seeds = torch.full((r,), 12345)
    zero = reference.sample(x, t, seeds)
    assert torch.equal(reference.sample(x, t, seeds, torch.zeros(r, dtype=torch.int64)), zero)
    pos = torch.arange(r)
    moved = reference.sample(x, t, seeds, pos)
    assert (moved != zero).float().mean() > 0.9
    assert torch.equal(reference.sample(x, t, seeds, pos), moved)
    assert len(set(moved.tolist())) > 40  # one seed, many positions: spread over the row


def test_torch_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOGITS_GATHER_SAMPLING_TORCH: 1 forces the torch-ops path, 0 or unset leaves the
    fused path on; any other value is a problem (raised on every rank at construction)."""
    from logits_gather.sampling.fused import policy

    monkeypatch.delenv(policy.TORCH_ENV, raising=False)
    assert policy.torch_wanted() == (False, [])
    monkeypatch.setenv(policy.TORCH_ENV, "0")
    assert policy.torch_wanted() == (False, [])
    monkeypatch.setenv(policy.TORCH_ENV, "1")
    assert policy.torch_wanted() == (True, [])
    monkeypatch.setenv(policy.TORCH_ENV, "yes")
    assert policy.torch_wanted()[1] == [f"{policy.TORCH_ENV} must be 0 or 1 (or unset), got 'yes'"]


def _switch_differs(rank: int, world: int) -> str:
    import os

    from logits_gather import sampling
    from logits_gather.sampling.fused import policy

    os.environ[policy.TORCH_ENV] = "1" if rank else "0"
    with pytest.raises(ValueError, match=f"{policy.TORCH_ENV} differs between ranks") as info:
        sampling.VocabParallelSampler(64, 4, device="cpu")
    return str(info.value)


def test_torch_switch_must_agree() -> None:
    """A switch that differs between ranks raises the same error on every rank."""
    results = run_ranks(_switch_differs, 2)
    assert results[0] == results[1] and "rank 0=False, rank 1=True" in results[0]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("columns", [1, 100, 150, 1001, 4099, 18944, 37888, 75776, 151552])
def test_fused_launch_geometry(world: int, columns: int) -> None:
    """The fused kernels' launch geometry (pure arithmetic, no Triton needed): splits
    cover the shard, the waiting kernels' block covers every split, top-k's groups bound
    k, no radix-select kernel runs more threads than elements (replicated elements
    gave wrong top_k tokens on GPUs: benchmarks/NOTES.md, session 3), and no kernel runs
    more than 8 warps (a 16-warp nucleus_final's optimised code returned wrong rows:
    FINAL_WARPS, session 13)."""
    from logits_gather.sampling.fused.plans import FINAL_WARPS, NARROW, WIDE, Geometry

    assert FINAL_WARPS <= 8

    for block, warps in (WIDE, NARROW):
        geo = Geometry.of(columns, world, block, warps)
        assert geo.splits * geo.block >= columns > (geo.splits - 1) * geo.block
        assert geo.c == world * geo.splits <= geo.cand < 2 * max(geo.c, 2)
        assert 32 * geo.warps <= geo.block
        for k in range(1, 65):
            plan = geo.topk(k)
            assert plan.g * geo.c >= k and plan.g <= geo.block and plan.kp >= k
            assert 32 * plan.probe >= 2 * (1 + plan.g)
            assert 32 * plan.reduce <= max(32, geo.cand * plan.g)
            assert 32 * plan.final <= max(32, geo.cand * plan.kp)
            assert max(geo.warps, plan.probe, plan.reduce, plan.final) <= 8
            # One launch per round (kernels/waiters.py): the writer's lanes, and never more
            # threads than the row work's elements; 0 means two launches.
            assert plan.probe_one == 0 or 2 * (1 + plan.g) <= 32 * plan.probe_one
            assert 32 * plan.probe_one <= max(32, geo.cand * plan.g)
            assert plan.probe_one <= plan.probe and 1 <= plan.final_one <= geo.warps
            assert 32 * plan.final_one <= max(32, geo.cand * plan.kp)


def test_fused_radix_key_bits() -> None:
    """The overflow writer's and the final kernels' radix keys of x: 16 bits only for
    bfloat16 (exact there: its values fill fp32's top 16 bits), else all 32 (float16
    values need 19; fewer bits would tie distinct values and pick wrong cuts)."""
    from logits_gather.sampling.fused.plans import xbits

    assert xbits(torch.bfloat16) == 16
    assert xbits(torch.float16) == 32 and xbits(torch.float32) == 32
    x = torch.randn(10000).to(torch.bfloat16).float()
    top = x.view(torch.int32) >> 16  # the 16 bits the keys keep
    assert torch.unique(top).numel() == torch.unique(x).numel()  # distinct values, distinct keys


def test_topk_reduce_rebuilds_bfloat16_keys() -> None:
    """topk_reduce's 16-bit radix select returns the top half of a group maximum's key
    ``ordered32(x) ^ 2**31``; for bfloat16 x the low half is all zeros for x >= 0 and all
    ones for x < 0 (ordered32 flips a negative's bits), which rebuilds the key exactly."""
    x = torch.cat([torch.randn(20000) * 40, torch.tensor([0.0, -0.0, 1e-30, -1e-30])])
    x = x.to(torch.bfloat16).float()
    b = x.view(torch.int32)
    b = torch.where(x == 0, torch.zeros_like(b), b)
    h = torch.where(b < 0, b ^ 0x7FFFFFFF, b)  # ordered32
    u = (h.long() + 2**31) & 0xFFFFFFFF  # the kernel's uint32 key
    top = (u >> 16) << 16
    rebuilt = torch.where(top < 2**31, top | 0xFFFF, top)
    assert torch.equal(rebuilt, u)


@pytest.mark.parametrize("splits", [1, 10, 19, 37, 74])
@pytest.mark.parametrize("which", ["round 2", "overflow"])
def test_idle_writer_programs(splits: int, which: str) -> None:
    """Idle writers' programs per row: every split served (1..splits programs), about
    ``total`` in all once M is large, and never fewer than ``least`` per row."""
    from logits_gather.sampling.fused import plans as geometry

    total, least = (
        (geometry.IDLE_PROGRAMS, geometry.IDLE_LEAST)
        if which == "round 2"
        else (geometry.OVERFLOW_PROGRAMS, geometry.OVERFLOW_LEAST)
    )
    for m in (1, 2, 7, 16, 33, 64, 256, 1024, 8192):
        p = geometry.idle_programs(m, splits, None if which == "round 2" else total,
                                   None if which == "round 2" else least)  # fmt: skip
        assert 1 <= p <= splits
        assert p == splits or p >= least
        assert p * m <= max(total, least * m)


def _free_cached(rank: int, world: int) -> tuple[int, int, bool]:
    from logits_gather import sampling

    shard = torch.randn(3, 50)
    first = sampling.cached_sampler(shard)
    sampling.greedy(shard)
    dropped = sampling.free_samplers()
    again = sampling.free_samplers()
    rebuilt = sampling.cached_sampler(shard) is not first
    sampling.free_samplers()
    return dropped, again, rebuilt


def test_free_samplers_drops_the_cached_ones() -> None:
    """``free_samplers`` drops what the module functions cached (so they can be freed before
    the process group is destroyed); the next call builds a new sampler."""
    assert run_ranks(_free_cached, 2) == [(1, 0, True)] * 2


def _zero_positions(rank: int, world: int) -> bool:
    from logits_gather.sampling import VocabParallelSampler

    sampler = VocabParallelSampler(50, 8, fused=False)
    a, b = sampler._zero_positions(3), sampler._zero_positions(8)
    assert a.data_ptr() == b.data_ptr() and a.shape == (3,) and b.dtype == torch.int64
    sampler.capacity = 32  # a growing sampler's capacity after a larger M
    c = sampler._zero_positions(20)
    assert c.shape == (20,) and c.data_ptr() != a.data_ptr()
    assert len(sampler._zeros) == 2  # the first buffer stays alive: graphs may read it
    return bool((a == 0).all() and (b == 0).all() and (c == 0).all())


def test_zero_positions_are_kept_views() -> None:
    """``positions=None`` reads a zeros buffer that only grows and is
    never freed (no fill kernel per call; captured graphs keep reading it)."""
    assert run_ranks(_zero_positions, 1) == [True]
