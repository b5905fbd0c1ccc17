"""Exactness of the filtered sample on the rows issue 67's select must get right (gloo, CPU).

Every rank builds the same ``[M, V]`` logits from fixed seeds and keeps its shard; tokens
must equal :func:`.reference.sample` on the gathered logits at tp 1, 2, 3 and 4 (so they
are the same at every tp and on every rank), for greedy, plain sampling, ``top_k``,
``top_p``, ``top_k`` with ``top_p``, ``min_p`` and per-row mixes, in bfloat16, float16
and float32. ``tests/sampling/test_sampling.py`` covers random, few-valued and special
(NaN, inf) rows with off values and run-end top-p; this file adds the distributions a
distribution-independent threshold select (a radix/histogram select over the scores)
can get wrong. Each case is one row repeated :data:`R` times with distinct seeds, so a
wrong kept set changes some of its tokens (a wrong token needs a draw in the difference).

Rows (:func:`base_rows`; what each guards):

- ``ties``: values in -3..2 (every run crosses every shard) and ten maxima on both sides
  of every tp's shard boundaries: top-k's k-th value inside, at the end of and just past
  a run of equal values split over the ranks (k = 9, 10, 11).
- ``wide_run``: one top token, then a run of 300 equal values across every boundary,
  then a low tail: top-p's and top-k's (k = 11, 65) cuts land inside the run, which
  stays whole.
- ``flat``, ``flat_hot``: every logit equal (0 at T = 1.3, 7.5 at T = 1.5): one run
  that is the whole vocabulary, whatever top-p or top-k cut it.
- ``nearly_flat``: ``randn * 0.01`` at T = 1.0..1.5 (bfloat16 rounds it into runs of up
  to five equal values; float32 keeps it distinct): the nucleus holds hundreds of
  tokens, the case the candidate rounds hand to the slow fallback.
- ``flat_0.5``: ``randn * 0.5`` at T = 1.2, the flat profile of ``docs/sampling.md``.
- ``ulp_steps``: float32 values one ulp apart (1.0 + i * 2**-23, four of each): keys that
  share all but their last bits, so a radix select must refine to the last digit
  (bfloat16 and float16 round them to one run).
- ``one_hot_ninf``: one finite logit on a shard boundary, the rest ``-inf``.
- ``one_hot_far``: one logit at +24, the rest at 0: it holds all but ~4e-11 of the mass
  each, so top_p = 0.9999999 keeps it alone and top_p = 1 - 1e-12 keeps the whole row.
- ``zero_mass_tail``: one logit at 0, the rest at -30, whose masses ``q`` round to 0:
  top_p just below 1 drops them all, top_p = 1 keeps them.

Temperatures are per row (T = 0 on every seventh row, T = 1.0, 1.2, 1.3, 1.5 on the flat
kinds). Filters (:func:`filters`): ``top_k`` at 1, the tie boundaries, 65, V - 1 and V;
``top_p`` 0.5, 0.9, 1 - 1e-7, 1 - 1e-12 and 1.0; per-row ``top_p`` that put the
threshold exactly at a run's end, one unit of mass past it and one short of it, deep in
the row and before its heaviest run (:func:`run_end_p`); ``top_k`` with ``top_p``;
``min_p`` 0.05, 1.0 and per row; and one call with per-row tensors of every filter (off
values and float32 ``top_p`` included). float16 runs at tp 1 and 2 only (tp 3 and 4 are
four processes on CI's few cores). :func:`test_cases_hit_their_targets` checks on the
definition that the rows and per-row ``top_p`` do what this list says (no spawn).
"""

from __future__ import annotations

import math

import pytest
import torch

from scripts.support.dist import run_ranks

V = 768  # 2, 3 and 4 ranks: shard boundaries at 192, 256, 384, 512, 576
R = 8  # seeds per kind of row
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BOUNDARIES = (192, 256, 384, 512, 576)
STRADDLE = [b + d for b in BOUNDARIES for d in (-1, 0)]  # ten columns, both sides of each
SEED = 67
KINDS = ("ties", "wide_run", "flat", "flat_hot", "nearly_flat", "flat_0.5", "ulp_steps",
         "one_hot_ninf", "one_hot_far", "zero_mass_tail")  # fmt: skip
TEMPS = {"flat": 1.3, "flat_hot": 1.5, "nearly_flat": 1.0, "flat_0.5": 1.2, "ulp_steps": 1.0}
NEG_INF = float("-inf")


def base_rows(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """One fp32 row of ``V`` per kind (see the module docstring)."""
    rows = {}
    x = torch.randint(-3, 3, (V,), generator=gen).float()
    x[STRADDLE] = 4.0
    rows["ties"] = x
    x = torch.full((V,), -6.0)
    x[torch.randperm(V, generator=gen)[:300]] = 1.0
    x[[b + d for b in BOUNDARIES for d in (-2, -1, 0, 1)]] = 1.0  # the run crosses each
    x[100] = 3.0
    rows["wide_run"] = x
    rows["flat"] = torch.zeros(V)
    rows["flat_hot"] = torch.full((V,), 7.5)
    rows["nearly_flat"] = torch.randn(V, generator=gen) * 0.01
    rows["flat_0.5"] = torch.randn(V, generator=gen) * 0.5
    steps = torch.randperm(V, generator=gen) // 4
    rows["ulp_steps"] = 1.0 + steps.float() * 2.0**-23
    x = torch.full((V,), NEG_INF)
    x[384] = 3.0
    rows["one_hot_ninf"] = x
    x = torch.zeros(V)
    x[511] = 24.0
    rows["one_hot_far"] = x
    x = torch.full((V,), -30.0)
    x[256] = 0.0
    rows["zero_mass_tail"] = x
    assert tuple(rows) == KINDS
    return rows


def batch(dtype: torch.dtype):
    """``(full [M, V], temperature, seeds, positions, kinds)``, the same on every rank: the
    same rows in every dtype, other seeds (the draws of one dtype do not repeat another's)."""
    gen = torch.Generator().manual_seed(SEED)
    rows = base_rows(gen)
    gen.manual_seed(SEED + DTYPES.index(dtype))
    full = torch.stack([rows[k] for k in KINDS for _ in range(R)]).to(dtype)
    kinds = [k for k in KINDS for _ in range(R)]
    temp = torch.tensor([TEMPS.get(k, 1.0) for k in kinds])
    temp[1::7] = 0.0
    temp[[i for i, k in enumerate(kinds) if k == "nearly_flat"]] = torch.tensor(
        [1.0, 1.1, 1.25, 1.5] * (R // 4)
    )
    seeds = torch.randint(-(2**62), 2**62, (len(kinds),), generator=gen)
    pos = torch.randint(0, 2**31, (len(kinds),), generator=gen)
    return full, temp, seeds, pos, kinds


def masses(full: torch.Tensor, temp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition's scores ``s`` and integer masses ``q`` (no filter before top-p)."""
    from logits_gather.sampling import reference

    s = reference.scaled(full, temp)
    q = torch.floor(torch.exp(s - s.amax(1, keepdim=True)) * reference.MASS_SCALE)
    return s, q.nan_to_num_(0.0).to(torch.int64)


def _p_for(z: int, target: int) -> float:
    """The largest float64 ``p <= 1`` with ``ceil(z * p) == target`` (``1 <= target <= z``)."""
    p = min(1.0, target / z)
    while p < 1.0 and math.ceil(z * p) <= target:
        p = math.nextafter(p, 2.0)
    while math.ceil(z * p) > target:
        p = math.nextafter(p, 0.0)
    return p


def run_end_p(full: torch.Tensor, temp: torch.Tensor, shift: int, deep: bool) -> torch.Tensor:
    """Per-row float64 top_p whose threshold ``thr`` is the cumulative mass at the end of
    a run of equal scores, plus ``shift`` (-1, 0 or +1 units of mass, clamped to 1..Z).
    ``deep``: the first run end at or past half the mass (a cut deep in the row); else the
    run end followed by the heaviest run (one unit more must add that whole run). The top
    run when it is the only one; 1.0 in rows with a non-finite maximum."""
    s, q = masses(full, temp)
    order = torch.sort(s, dim=1, descending=True, stable=True)
    cum = q.gather(1, order.indices).cumsum(1)
    ends = torch.ones_like(s, dtype=torch.bool)
    ends[:, :-1] = order.values[:, :-1] != order.values[:, 1:]  # a run's last element
    out = []
    for i in range(full.shape[0]):
        if not math.isfinite(float(s[i].max())):
            out.append(1.0)
            continue
        at = cum[i][ends[i]].tolist()
        z = at[-1]
        if deep:
            end = next((c for c in at if 2 * c >= z and c < z), at[0])
        else:
            nxt = [b - a for a, b in zip(at[:-1], at[1:], strict=True)]
            end = at[nxt.index(max(nxt))] if nxt else at[0]
        out.append(_p_for(z, min(max(end + shift, 1), z)))
    return torch.tensor(out, dtype=torch.float64)


def filters(full: torch.Tensor, temp: torch.Tensor) -> list[dict]:
    """The calls' filters (see the module docstring)."""
    m = full.shape[0]
    cycle = torch.arange(m)

    def col(values):
        return torch.tensor(values)[cycle % len(values)]

    calls: list[dict] = [dict(top_k=k) for k in (1, 9, 10, 11, 65, V - 1, V)]
    calls += [dict(top_p=p) for p in (0.5, 0.9, 1 - 1e-7, 1 - 1e-12, 1.0)]
    calls += [dict(top_p=run_end_p(full, temp, d, deep)) for d in (-1, 0, 1) for deep in (1, 0)]
    calls += [dict(top_k=10, top_p=0.9), dict(top_k=col([11, 65, V, 0, 1]), top_p=0.5)]
    calls += [dict(min_p=0.05), dict(min_p=1.0), dict(min_p=col([0.0, 0.5, 1.0, 1e-3]))]
    calls.append(
        dict(
            top_k=col([0, 10, 11, V, 300, 2 * V, 1]),
            top_p=col([1.0, 0.9, 1 - 1e-7, 0.5, 0.999]).float(),
            min_p=col([0.0, 0.02, 0.0]),
        )
    )
    return calls


def _check(rank: int, world: int) -> dict[str, list[int]]:
    from logits_gather import sampling
    from logits_gather.sampling import reference

    torch.set_num_threads(1)  # up to 4 ranks share the machine's cores
    n = V // world
    tokens: dict[str, list[int]] = {}
    for dtype in DTYPES if world <= 2 else (torch.bfloat16, torch.float32):
        full, temp, seeds, pos, _ = batch(dtype)
        shard = full[:, rank * n : (rank + 1) * n].contiguous()
        got = sampling.greedy(shard)
        assert torch.equal(got, full.argmax(1)), f"{dtype} greedy"
        tokens[f"{dtype} greedy"] = got.tolist()
        for f in [{}] + filters(full, temp):
            got = sampling.sample(shard, temp, seeds, pos, **f)
            want = reference.sample(full, temp, seeds, pos, **f)
            name = f"{dtype} {_describe(f)}"
            bad = (got != want).nonzero().flatten().tolist()
            assert not bad, f"{name}: rows {bad[:8]} got {got[bad[:8]]} want {want[bad[:8]]}"
            tokens[name] = got.tolist()
    sampling.free_samplers()
    return tokens


def _describe(f: dict) -> str:
    return (
        " ".join(
            f"{k}=per-row" if isinstance(v, torch.Tensor) else f"{k}={v}" for k, v in f.items()
        )
        or "plain"
    )


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_adversarial_rows_match_the_definition(world: int) -> None:
    """Every rank's tokens equal the definition's on the gathered logits (hence each
    other's and every tp's)."""
    results = run_ranks(_check, world, timeout=300.0)
    for r, res in enumerate(results):
        assert res == results[0], f"rank {r} sampled differently"


def test_cases_hit_their_targets() -> None:
    """The rows and per-row top_p do what the module docstring says, on the definition."""
    from logits_gather.sampling import reference

    for dtype in DTYPES:
        full, temp, seeds, pos, kinds = batch(dtype)
        s, q = masses(full, temp)
        idx = {k: kinds.index(k) for k in KINDS}

        def kept(row: str, s=s, idx=idx, **f) -> torch.Tensor:
            i = idx[row]
            one = {k: v[i : i + 1] if isinstance(v, torch.Tensor) else v for k, v in f.items()}
            return reference.kept(s[i : i + 1], **one)[0][0]

        where = str(dtype)
        # ties: ten maxima straddling every boundary; k = 9 keeps all ten, k = 11 the next run
        assert int(kept("ties", top_k=9).sum()) == 10, where
        assert int(kept("ties", top_k=11).sum()) > 100, where
        # wide_run: top-p 0.5's cut is inside the 300+ run, kept whole, on every shard
        keep = kept("wide_run", top_p=0.5)
        assert int(keep.sum()) > 300 and int(q[idx["wide_run"]][keep].min()) > 0, where
        for w in (2, 3, 4):
            assert bool(keep.view(w, -1).any(1).all()), where
        # the whole vocabulary kept
        for row in ("flat", "flat_hot"):
            assert bool(kept(row, top_p=0.5).all()) and bool(kept(row, top_k=1).all()), where
        assert bool(kept("one_hot_far", top_p=1 - 1e-12).all()), where
        assert bool(kept("nearly_flat", top_p=1 - 1e-12).all()), where
        # one token holds the mass
        assert int(kept("one_hot_far", top_p=1 - 1e-7).sum()) == 1, where
        assert int(kept("zero_mass_tail", top_p=1 - 1e-12).sum()) == 1, where
        assert bool(kept("zero_mass_tail", top_p=1.0).all()), where
        assert int(kept("one_hot_ninf", top_p=0.5).sum()) == 1, where
        # nearly flat: hundreds of tokens in a 0.9 nucleus
        assert int(kept("nearly_flat", top_p=0.9).sum()) > 500, where
        # ulp steps: distinct keys one ulp apart in float32 (one run otherwise)
        distinct = s[idx["ulp_steps"]].unique().numel()
        assert distinct == (V // 4 if dtype == torch.float32 else 1), where
        # run_end_p: the cut at a run's end; one unit more reaches the next run; one less
        # stays in the same run
        runs = ("ties", "wide_run", "nearly_flat", "flat_0.5")
        if dtype == torch.float32:
            runs += ("ulp_steps",)
        cuts = {(d, deep): run_end_p(full, temp, d, deep) for d in (-1, 0, 1) for deep in (0, 1)}
        for deep, row in [(deep, row) for deep in (0, 1) for row in runs]:
            at, past, short = (cuts[d, deep] for d in (0, 1, -1))
            i = idx[row]
            n_at = int(kept(row, top_p=at).sum())
            n_past = int(kept(row, top_p=past).sum())
            n_short = int(kept(row, top_p=short).sum())
            what = f"{where} {row} deep={deep}: {n_short} {n_at} {n_past}"
            assert n_short == n_at < n_past, what
            thr = math.ceil(int(q[i].sum()) * float(at[i]))
            assert thr == int(q[i][kept(row, top_p=at)].sum()), f"{where} {row}"
