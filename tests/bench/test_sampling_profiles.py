"""The sampling benchmark's logits profiles, read limit, noise flags and options: entropy
in range, temperatures as specified, the same rows from the same seed. CPU, fast."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from logits_gather.bench.sampling import options, profiles, readlimit, tables

V = 4096


@pytest.mark.parametrize("vocab", [1024, V, 151552])
def test_peaked_rows_hit_their_entropy(vocab: int) -> None:
    logits, temp = profiles.make("peaked", 32 if vocab < 10**5 else 4, vocab, seed=3)
    assert torch.all(temp == profiles.PEAKED_T)
    got = profiles.entropy(logits.to(torch.bfloat16), temp)
    lo, hi = profiles.PEAKED_NATS
    # bf16 rounding moves the entropy a little off its target
    assert all(lo - 0.1 <= h <= hi + 0.1 for h in got), got
    # randomly permuted: the most likely token is not always the first column
    assert len(set(logits.argmax(dim=1).tolist())) > 1


def test_zipf_exponent_inverts_the_entropy() -> None:
    nats = torch.tensor([0.5, 1.0, 2.0, 3.0])
    a = profiles.zipf_exponent(V, nats)
    logr = torch.log(torch.arange(1, V + 1, dtype=torch.float64))
    for ai, want in zip(a.tolist(), nats.tolist(), strict=True):
        lp = (-ai * logr).log_softmax(0)
        assert abs(float(-(lp.exp() * lp).sum()) - want) < 0.05


def test_temperatures_as_specified() -> None:
    m = 64
    _, t08 = profiles.make("t08", m, V)
    assert torch.all(t08 == 0.8)
    _, flat = profiles.make("flat", m, V)
    assert torch.all((flat >= 1.0) & (flat <= 1.5)) and len(set(flat.tolist())) > m // 2
    _, mixed = profiles.make("mixed", m, V)
    rows = torch.arange(m)
    assert torch.all(mixed[rows % 8 == 1] == 0) and torch.all(mixed[rows % 8 == 2] == 1)
    assert torch.all((mixed >= 0) & (mixed <= 1.5))
    assert mixed.min() == 0 and 0 < mixed[rows % 8 > 2].min() < 0.75 < mixed.max()
    ent = profiles.entropy(profiles.make("mixed", m, V)[0], mixed)
    assert profiles.entropy_range(ent)["greedy_rows"] == m // 8


@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_same_seed_same_rows(profile: str) -> None:
    a, ta = profiles.make(profile, 8, V, seed=5)
    b, tb = profiles.make(profile, 8, V, seed=5)
    c, _ = profiles.make(profile, 8, V, seed=6)
    assert torch.equal(a, b) and torch.equal(ta, tb) and not torch.equal(a, c)
    assert a.shape == (8, V) and a.dtype == torch.float32 and torch.isfinite(a).all()


def test_unknown_profile() -> None:
    with pytest.raises(ValueError, match="unknown profile 'hot'"):
        profiles.make("hot", 1, V)


def test_read_limit_units() -> None:
    # 1 row of 1000 bf16 columns = 2000 bytes at 2 GB/s: 1 µs
    assert readlimit.read_limit_us(1, 1000, 2.0) == pytest.approx(1.0)
    runs = [{"gbps": 3.0, "bytes": 8}, {"gbps": 2.0, "bytes": 8}]
    assert readlimit.combine(runs)["gbps"] == 2.0


def test_noise_flags() -> None:
    def s(med: float, spread: float) -> dict:
        return {"median": med, "spread_pct": spread}

    cells = {1: {"greedy": {"ours": s(50.0, 5.0)}}, 4: {"greedy": {"ours": s(20.0, 300.0)}}}
    flagged = tables.flag_noise(cells, [1, 4])
    assert cells[1]["greedy"]["ours"]["noisy"] == ["slower than at M=4 (20.0 us)"]
    assert cells[4]["greedy"]["ours"]["noisy"] == ["passes differ by 300%"]
    assert len(flagged) == 2
    line = tables.table("t", cells, [1, 4], ["ours"], {1: 1.0, 4: 2.0})[2]
    assert line.rstrip().endswith("50.0") and "!" in line


def test_profiles_option(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = options.parse(["--device", "cpu", "--out", str(tmp_path)])
    assert args.profiles == options.CPU_PROFILES
    args = options.parse(["--device", "cpu", "--out", str(tmp_path), "--profiles", "flat,t08"])
    assert args.profiles == ("flat", "t08")
    with pytest.raises(SystemExit) as exc:
        options.parse(["--device", "cpu", "--out", str(tmp_path), "--profiles", "t08,hot"])
    assert exc.value.code == 2 and "--profiles must list some of" in capsys.readouterr().err
