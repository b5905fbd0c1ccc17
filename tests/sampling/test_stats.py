"""Statistics of ``sampling.sample``: draws follow softmax(x / T) restricted to the kept set.

Each configuration draws R tokens from one row of logits repeated R times with
R distinct seeds, and a chi-square test compares the counts with the softmax
probabilities (categories with expected count < 5 pooled). The p-value comes
from the regularised upper incomplete gamma function written below (no
scipy). A test fails at p < 1e-6, and each configuration also checks that the
same counts reject a wrong distribution (a 1.5x temperature; for the tie
case, a strict top-k without the tied extras), so the test has the power to
fail. Tokens outside the kept set must never appear.

The kept set of the top-p / min-p configurations is computed here independently, in
float64 from probabilities (min-p: ``p_j >= min_p * p_max``; top-p: the shortest
prefix of whole runs of equal logits whose cumulative probability reaches ``p``),
not from the library's integer masses; the configurations keep away from the
cut-offs, where the two could differ in the last bits.

The flat profiles (issue 67: T from 1.0 to 1.5, nearly flat and all-equal rows, where the
nucleus holds most of the row) run with fixed seeds, top_p midway between two run ends of
the float64 cumulative probability (:func:`flat_configs`). The same counts must reject a
nucleus with one token more and one token fewer (the check's power), and
:func:`test_flat_check_rejects_a_wrong_nucleus` feeds the check draws of the definition
whose nucleus holds one token more, then one fewer (planted bugs): both must fail it.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from scripts.support.dist import run_ranks

R = 20_000
V = 96
ALPHA = 1e-6
# (temperature, top_k, logits kind); "ties" puts four equal logits at the k-th value.
CONFIGS = (
    (1.0, None, "random"),
    (0.5, None, "random"),
    (2.0, None, "random"),
    (1.0, 5, "random"),
    (0.7, 3, "ties"),
    (1.3, 70, "random"),
)  # 70 > 64: radix select
# (temperature, filters, logits kind): top-p / min-p, alone, mixed, and a top-p cut in a run.
FILTERED = (
    (1.0, dict(top_p=0.8), "random"),
    (0.7, dict(min_p=0.05), "random"),
    (1.5, dict(top_p=0.9, min_p=0.02, top_k=30), "random"),
    (1.0, dict(top_p=0.55), "ties"),
)
FLAT_SEED = 67
# (temperature, target top_p, logits kind): the flat profiles; flat_configs moves each top_p
# midway between the two run ends around it.
FLAT = (
    (1.0, 0.7, "nearly_flat"),
    (1.5, 0.9, "nearly_flat"),
    (1.25, 0.6, "flat_0.5"),
    (1.0, 0.5, "flat"),
)


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper gamma Q(df/2, x/2)."""
    a, z = df / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    log_front = -z + a * math.log(z) - math.lgamma(a)
    if z < a + 1:  # series for P, then Q = 1 - P
        term = total = 1.0 / a
        n = a
        while term > total * 1e-15:
            n += 1
            term *= z / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300  # Lentz continued fraction for Q
    b = z + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h * math.exp(log_front)


def test_chi2_sf_known_values() -> None:
    for x, df, p in (
        (3.841459, 1, 0.05),
        (18.307038, 10, 0.05),
        (124.342113, 100, 0.05),
        (0.0158, 1, 0.9),
        (2.0, 2, math.exp(-1.0)),
        (30.577914, 15, 0.01),
    ):
        assert abs(chi2_sf(x, df) - p) < 2e-6 * max(1.0, p / 1e-3), (x, df, chi2_sf(x, df))


def row_logits(seed: int, kind: str) -> torch.Tensor:
    """A ramp with noise (neighbouring logits about 0.6 apart, so temperature
    matters even within a small top-k), at random positions."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.arange(V) * -0.6 + torch.randn(V, generator=gen) * 0.3
    if kind == "nearly_flat":
        x = torch.randn(V, generator=gen) * 0.01
    elif kind == "flat_0.5":
        x = torch.randn(V, generator=gen) * 0.5
    elif kind == "flat":
        x = torch.zeros(V)
    if kind == "ties":  # top-3 cut lands inside a run of four equal logits
        x[1:5] = x[1]
    return x[torch.randperm(V, generator=gen)]


def expected(x: torch.Tensor, t: float, k: int | None) -> torch.Tensor:
    x = x.double()
    keep = x >= torch.topk(x, k).values[-1] if k else torch.ones_like(x, dtype=torch.bool)
    return torch.softmax((x / t).masked_fill(~keep, -math.inf), 0)


def expected_filtered(x: torch.Tensor, t: float, f: dict) -> torch.Tensor:
    """softmax(x / T) over the kept set, in float64 (see the module docstring)."""
    s = x.double() / t
    prob = torch.softmax(s, 0)
    keep = torch.ones_like(s, dtype=torch.bool)
    if f.get("min_p"):
        keep &= prob >= f["min_p"] * prob.max()
    if f.get("top_k"):
        keep &= s >= torch.topk(s, f["top_k"]).values[-1]
    if f.get("top_p", 1.0) < 1.0:
        pk = torch.where(keep, prob, 0.0)
        pk = pk / pk.sum()
        values = s[keep].unique(sorted=True).flip(0)
        cum = torch.stack([pk[s >= v].sum() for v in values])
        tau = values[int((cum < f["top_p"] - 1e-12).sum())]
        keep &= s >= tau
    return torch.softmax(s.masked_fill(~keep, -math.inf), 0)


def chi2_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    exp = probs * counts.sum()
    big = exp >= 5
    obs = torch.cat([counts[big].double(), counts[~big].sum(0, keepdim=True).double()])
    exp = torch.cat([exp[big], exp[~big].sum(0, keepdim=True)])
    if exp[-1] < 5:  # the pooled bin is still small: fold it into the smallest big one
        j = int(exp[:-1].argmin())
        obs[j] += obs[-1]
        exp[j] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    return chi2_sf(stat, len(exp) - 1)


def _draw(rank: int, world: int, seed: int, configs) -> list[list[int]]:
    from logits_gather import sampling

    n = V // world
    out = []
    for i, (t, k, kind) in enumerate(configs):
        x = row_logits(seed + i, kind)
        shard = x[rank * n : (rank + 1) * n].expand(R, n).to(torch.float32).contiguous()
        seeds = torch.arange(R) + (seed * 1_000_003 + i) * R
        f = k if isinstance(k, dict) else dict(top_k=k)
        tokens = sampling.sample(shard, torch.full((R,), t), seeds, **f)
        out.append(torch.bincount(tokens, minlength=V).tolist())
    return out


def _assert_filtered(seed: int, configs, counts: list[list[int]]) -> None:
    for i, ((t, f, kind), c) in enumerate(zip(configs, counts, strict=True)):
        x, c = row_logits(seed + i, kind), torch.tensor(c)
        probs = expected_filtered(x, t, f)
        assert int(c[probs == 0].sum()) == 0, f"T={t} {f}: drew tokens outside the kept set"
        p = chi2_p(c, probs)
        assert p >= ALPHA, f"T={t} {f} {kind}: chi-square p={p:.2e}, counts {c.tolist()}"
        wrong = chi2_p(c, expected(x, t, f.get("top_k")))  # the alternative: no top-p/min-p
        assert wrong < ALPHA, f"T={t} {f}: the test cannot reject the alternative (p={wrong})"


def _assert_fits(seed: int, configs, counts: list[list[int]]) -> None:
    for i, ((t, k, kind), c) in enumerate(zip(configs, counts, strict=True)):
        x, c = row_logits(seed + i, kind), torch.tensor(c)
        probs = expected(x, t, k)
        assert int(c[probs == 0].sum()) == 0, f"T={t} k={k}: drew tokens outside the top-k"
        p = chi2_p(c, probs)
        assert p >= ALPHA, f"T={t} k={k} {kind}: chi-square p={p:.2e}, counts {c.tolist()}"
        if kind == "ties":  # the alternative: a strict top-k that drops the tied extras
            first = torch.sort(x, descending=True, stable=True).indices[:k]
            alt = torch.zeros_like(probs)
            alt[first] = torch.softmax(x[first].double() / t, 0)
        else:
            alt = expected(x, t * 1.5, k)
        wrong = chi2_p(c, alt)
        assert wrong < ALPHA, f"T={t} k={k}: the test cannot reject the alternative (p={wrong})"


def _run_ends(x: torch.Tensor, t: float) -> torch.Tensor:
    """The float64 cumulative probability of softmax(x / T) at each run's end, largest
    values first (a run: equal logits)."""
    s = x.double() / t
    prob = torch.softmax(s, 0)
    return torch.stack([prob[s >= v].sum() for v in s.unique(sorted=True).flip(0)])


def flat_configs(seed: int) -> tuple:
    """FLAT with each top_p midway between the run ends around its target (so the float64
    nucleus and the library's integer masses agree); one run: the target itself."""
    out = []
    for i, (t, target, kind) in enumerate(FLAT):
        cum = _run_ends(row_logits(seed + i, kind), t)
        j = int((cum < target).sum())
        p = target if len(cum) == 1 else float(cum[j - 1] + cum[j]) / 2 if j else float(cum[0]) / 2
        out.append((t, dict(top_p=p), kind))
    return tuple(out)


def _nucleus(x: torch.Tensor, t: float, size: int) -> torch.Tensor:
    """softmax(x / T) over the ``size`` tokens of largest x (ties by lower id), float64."""
    s = x.double() / t
    keep = torch.zeros_like(s, dtype=torch.bool)
    keep[torch.sort(s, descending=True, stable=True).indices[:size]] = True
    return torch.softmax(s.masked_fill(~keep, -math.inf), 0)


def _assert_flat(seed: int, configs, counts: list[list[int]]) -> None:
    """The counts fit the float64 nucleus and reject it with one token more or fewer."""
    for i, ((t, f, kind), c) in enumerate(zip(configs, counts, strict=True)):
        x, c = row_logits(seed + i, kind), torch.tensor(c)
        probs = expected_filtered(x, t, f)
        where = f"T={t} {f} {kind}"
        assert int(c[probs == 0].sum()) == 0, f"{where}: drew tokens outside the nucleus"
        p = chi2_p(c, probs)
        assert p >= ALPHA, f"{where}: chi-square p={p:.2e}, counts {c.tolist()}"
        size = int((probs > 0).sum())
        for wrong in (size - 1, size + 1):
            if 0 < wrong <= V:
                p = chi2_p(c, _nucleus(x, t, wrong))
                assert p < ALPHA, f"{where}: cannot tell a nucleus of {wrong} from {size} ({p})"


def test_flat_distribution_tp1() -> None:
    configs = flat_configs(FLAT_SEED)
    _assert_flat(FLAT_SEED, configs, run_ranks(_draw, 1, FLAT_SEED, configs)[0])


def test_flat_distribution_tp2() -> None:
    configs = flat_configs(FLAT_SEED)[1:3]
    results = run_ranks(_draw, 2, FLAT_SEED + 1, configs)
    assert results[0] == results[1]
    _assert_flat(FLAT_SEED + 1, configs, results[0])


def test_flat_check_rejects_a_wrong_nucleus() -> None:
    """Planted bugs: draws of the definition whose top_p reaches one run further (one
    token more on these rows), or stops one run short (one token fewer), fail
    :func:`_assert_flat`; each planted nucleus fits its own draws."""
    from logits_gather.sampling import reference

    configs = flat_configs(FLAT_SEED)[:3]
    for i, (t, f, kind) in enumerate(configs):
        x = row_logits(FLAT_SEED + i, kind)
        cum = _run_ends(x, t)
        j = int((cum < f["top_p"]).sum())  # the nucleus ends at run j
        size = int((expected_filtered(x, t, f) > 0).sum())
        seeds = torch.arange(R) + (FLAT_SEED * 1_000_003 + i) * R
        for end, error in ((j + 1, "drew tokens outside"), (j - 1, "chi-square")):
            p = float(cum[end] + cum[end - 1]) / 2  # midway before run `end`'s end
            tokens = reference.sample(x.expand(R, V), torch.full((R,), t), seeds, top_p=p)
            counts = torch.bincount(tokens, minlength=V)
            with pytest.raises(AssertionError, match=error):
                _assert_flat(FLAT_SEED + i, configs[i : i + 1], [counts.tolist()])
            planted = _nucleus(x, t, size + end - j)
            assert chi2_p(counts, planted) >= ALPHA, f"T={t} {kind}: the planted nucleus"


@pytest.fixture
def seed() -> int:
    return random.randrange(2**20)


def test_softmax_distribution_tp1(seed: int) -> None:
    _assert_fits(seed, CONFIGS, run_ranks(_draw, 1, seed, CONFIGS)[0])


def test_softmax_distribution_tp2(seed: int) -> None:
    configs = CONFIGS[3:5]
    results = run_ranks(_draw, 2, seed, configs)
    assert results[0] == results[1]
    _assert_fits(seed, configs, results[0])


def test_filtered_distribution_tp1(seed: int) -> None:
    _assert_filtered(seed, FILTERED, run_ranks(_draw, 1, seed, FILTERED)[0])


def test_filtered_distribution_tp2(seed: int) -> None:
    configs = FILTERED[2:]
    results = run_ranks(_draw, 2, seed, configs)
    assert results[0] == results[1]
    _assert_filtered(seed, configs, results[0])


def test_noise_is_uniform_and_independent() -> None:
    """vLLM's murmur3 uniforms: flat over 256 bins, and no dependence between adjacent
    seeds, adjacent positions or adjacent token ids (16 x 16 joint bins)."""
    from logits_gather.sampling import reference

    base = random.randrange(2**40)
    ids = torch.arange(512) + random.randrange(10**6)
    for seeds, pos in (
        (torch.arange(base, base + 512), torch.full((512,), 7)),
        (torch.full((512,), base), torch.arange(512)),
    ):
        u = reference.uniform(seeds, pos, ids).double()
        # The fp32 sum of the two halves rounds to exactly 1 for the top ~2**-25 of
        # hashes (as in vLLM); log1p_neg clamps there, so the Gumbel stays finite.
        assert 0 < float(u.min()) and float(u.max()) <= 1
        flat = torch.bincount((u * 256).long().clamp_max(255).flatten(), minlength=256)
        assert chi2_p(flat, torch.full((256,), 1 / 256, dtype=torch.float64)) >= ALPHA
        b = (u * 16).long().clamp_max(15)
        for joint in (b[:-1] * 16 + b[1:], b[:, :-1] * 16 + b[:, 1:]):
            cells = torch.bincount(joint.flatten(), minlength=256)
            assert chi2_p(cells, torch.full((256,), 1 / 256, dtype=torch.float64)) >= ALPHA
    g = reference.gumbel(seeds, pos, ids)
    assert bool(torch.isfinite(g).all())
    assert bool(torch.isfinite(reference.log1p_neg(torch.ones(1))).all())
    gamma = 0.5772156649
    assert abs(float(g.double().mean()) - gamma) < 0.01
    assert abs(float(g.double().var()) - math.pi**2 / 6) < 0.05
