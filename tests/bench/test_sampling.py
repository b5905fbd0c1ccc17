"""``python -m logits_gather.bench.sampling`` on CPU: the CLI, the ``--out`` check, tiny
runs at tp 1 and 2, the JSON document, untouched inputs and the adapter to our API."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from logits_gather import sampling
from logits_gather.bench.sampling import measure as sampling_run
from logits_gather.bench.sampling import options as bench
from logits_gather.bench.sampling import peers
from tests.bench.cpu import cpu_env

TINY = ["--device", "cpu", "--rows", "1,3", "--vocab", "1024", "--profiles", "t08,mixed"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = cpu_env()
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "logits_gather.bench.sampling", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_cli_defaults_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = bench.parse(["--device", "cpu", "--out", str(tmp_path)])
    assert (args.tp, args.rows, args.vocab, args.graphs) == (2, bench.CPU_ROWS, 32768, False)
    for bad, says in (
        (["--tp", "0"], "--tp must be >= 1"),
        (["--tp", "3", "--vocab", "1024"], "must be a positive multiple of --tp 3"),
        (["--rows", "1,x"], "comma-separated integers"),
        (["--vocab", "64"], "at least 64 columns"),
    ):
        with pytest.raises(SystemExit) as exc:
            bench.parse(["--device", "cpu", "--out", str(tmp_path), *bad])
        assert exc.value.code == 2
        assert says in capsys.readouterr().err, bad


def test_unwritable_out_fails_before_any_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    t0 = time.monotonic()
    proc = _run([*TINY, "--tp", "1", "--out", str(blocker / "out")], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is not writable" in proc.stderr and "nothing was run" in proc.stderr
    assert "eager" not in proc.stdout and time.monotonic() - t0 < 60


@pytest.mark.parametrize("tp", [1, 2])
def test_tiny_run_writes_table_json_png(tmp_path: Path, tp: int) -> None:
    proc = _run([*TINY, "--tp", str(tp), "--out", str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert "peer vllm unavailable, going on without it" in text
    assert "ours/torch" in text and "lower is better" in text
    assert "inputs unchanged: ok" in text
    stem = tmp_path / f"sampling_tp{tp}_cpu_bf16_V1024"
    doc = json.loads(stem.with_suffix(".json").read_text())
    assert doc["setup"]["tp"] == tp and doc["setup"]["methods"] == ["ours", "torch"]
    assert "vllm" in doc["setup"]["unavailable"]
    assert doc["problems"] == [] and list(doc["profiles"]) == ["t08", "mixed"]
    assert all(p["graph"] == {} and set(p["eager"]) == {"1", "3"} for p in doc["profiles"].values())
    for cells in (c for p in doc["profiles"].values() for c in p["eager"].values()):
        assert set(cells) == set(peers.OPS)
        for methods in cells.values():
            assert set(methods) == {"ours", "torch"}
            for s in methods.values():
                assert s["median"] > 0 and len(s["per_rank"]) == tp
    assert {t["status"] for t in doc["targets"]} == {"not measured"}
    assert stem.with_suffix(".txt").read_text().strip() in text
    pytest.importorskip("matplotlib")
    assert stem.with_suffix(".png").stat().st_size > 0


@pytest.fixture
def one_rank(tmp_path: Path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def _fake_vllm() -> types.SimpleNamespace:
    """Stand-ins with vLLM's in-place contract: they write into the fp32 copy."""

    def temperature(x, idx, temp):
        x.div_(temp[idx, None])

    def min_p(x, idx, mp):
        probs = x.softmax(-1)
        x.masked_fill_(probs < probs.amax(-1, keepdim=True) * mp[idx, None], float("-inf"))

    def gumbel(x, idx, temp, seeds, pos, *, apply_temperature, is_drafting):
        return x.argmax(-1)

    return types.SimpleNamespace(
        apply_temperature=temperature,
        apply_min_p=min_p,
        apply_top_k_top_p=lambda x, k, p, *, has_topp_only_rows: x,
        gumbel_sample=gumbel,
    )


def test_no_method_modifies_its_input(one_rank) -> None:
    (shard, temp, seeds, pos), _ = sampling_run._inputs(3, 512, 0, torch.device("cpu"))
    calls, own = sampling_run._methods(shard, temp, seeds, pos, 4, _fake_vllm())
    assert set(calls) == {"ours", "torch", "vllm"}
    for fns in calls.values():
        for fn in fns.values():
            fn()
    check = sampling_run._check(calls, own, shard, 3)
    assert check["problems"] == [] and set(check["agreement"]) == set(peers.OPS)
    # The check must catch a method that writes into its input.
    own["torch"].mul_(2)
    problems = sampling_run._check(calls, own, shard, 3)["problems"]
    assert "M=3: torch modified its input logits" in problems


class _OldApi:
    def __init__(self, columns, capacity, group=None, device=None, *, check_values=True):
        self.made = (columns, capacity, group, device, check_values)
        self.seen: list = []

    def greedy(self, shard):
        return shard.argmax(-1)

    def sample(self, shard, temperature, seed, top_k=None, top_p=None, min_p=None):
        self.seen.append((top_k, top_p, min_p))
        return shard.argmax(-1)


class _NewApi(_OldApi):
    def __init__(self, columns, capacity, device=None, group=None):
        self.made, self.seen = (columns, capacity, group, device), []

    def sample(
        self, shard, temperature, seed, positions=None, *, top_k=None, top_p=None, min_p=None
    ):
        self.seen.append((positions, top_k, top_p, min_p))
        return shard.argmax(-1)


@pytest.mark.parametrize("api", [_OldApi, _NewApi])
def test_adapter_fits_both_apis(monkeypatch: pytest.MonkeyPatch, api: type) -> None:
    made: list = []
    monkeypatch.setattr(
        sampling, "VocabParallelSampler", lambda *a, **k: made.append(api(*a, **k)) or made[-1]
    )
    monkeypatch.setattr(
        peers,
        "signature",
        lambda f: __import__("inspect").signature(api if f is sampling.VocabParallelSampler else f),
    )
    shard, pos = torch.randn(2, 64), torch.tensor([5, 6])
    calls = peers.ours_calls(shard, torch.ones(2), torch.zeros(2), pos, capacity=4)
    for fn in calls.values():
        assert torch.equal(fn(), shard.argmax(-1))
    s = made[0]
    assert s.made[:2] == (64, 4) and s.made[2] is None and s.made[3] == shard.device
    if api is _OldApi:
        assert s.made[4] is False and (50, 0.9, None) in s.seen
    else:
        assert all(seen[0] is pos for seen in s.seen) and (pos, 50, 0.9, None) in s.seen
