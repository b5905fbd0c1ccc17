"""The benchmark's pieces without running it: placement, the limit's clipping and n/a,
the targets, the world-size-1 probe's buffers, and one-way imports. CPU only, fast."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from logits_gather.bench import plan
from logits_gather.bench.cli import UsageError, parse
from logits_gather.bench.gather import limit, report, targets

BENCH = Path(__file__).resolve().parents[2] / "logits_gather" / "bench"


def _plan(args: list[str], gpus: int, env: dict | None = None) -> plan.Plan:
    return plan.plan_ranks(parse(args), env=env or {}, gpus=gpus)


def test_placement() -> None:
    p = _plan(["--tp", "2"], gpus=2)
    assert (p.mode, p.pg_backend, p.tag, p.shared) == ("nccl", "nccl", "2gpu", False)
    assert [p.device(r).index for r in range(2)] == [0, 1]
    p = _plan(["--tp", "8", "--ranks-per-gpu", "4"], gpus=2)
    assert (p.mode, p.pg_backend, p.gpus_used, p.ranks_per_gpu) == ("spread", "gloo", 2, 4)
    assert [p.device(r).index for r in range(8)] == [0, 1] * 4  # rank r on GPU r % G
    assert "latency-only" in p.tag and plan.rank_env(p)[plan.OVERLAP_ENV] == "1"
    assert plan.rank_env(p)[plan.LOADING_ENV] == "EAGER"
    p = _plan(["--ranks-per-gpu", "2"], gpus=2)  # tp defaults to GPUs x R
    assert (p.tp, p.mode) == (4, "spread")
    p = _plan(["--tp", "4", "--colocate"], gpus=2)
    assert (p.mode, p.gpus_used, p.ranks_per_gpu) == ("colocated", 1, 4)
    assert {p.device(r).index for r in range(4)} == {0}
    assert _plan([], gpus=1).mode == "colocated" and _plan([], gpus=0).mode == "cpu"
    assert plan.OVERLAP_ENV not in plan.rank_env(_plan(["--tp", "2"], gpus=2))
    assert plan.LOADING_ENV not in plan.rank_env(_plan(["--tp", "2"], gpus=2))
    p = _plan(
        ["--tp", "4", "--ranks-per-gpu", "2"],
        gpus=2,
        env={"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"},
    )
    assert (p.torchrun, p.mode, p.gpus_used) == (True, "spread", 2)


@pytest.mark.parametrize(
    "args, gpus, message",
    [
        (["--tp", "4"], 2, "--ranks-per-gpu 2"),
        (["--tp", "6", "--ranks-per-gpu", "4"], 2, "does not divide"),
        (["--tp", "8", "--ranks-per-gpu", "2"], 2, "need 4 GPUs, 2 are visible"),
        (["--tp", "4", "--ranks-per-gpu", "2", "--colocate"], 2, "exclude each other"),
        (["--ranks-per-gpu", "2"], 0, "needs GPUs"),
        (["--ranks-per-gpu", "0"], 2, "must be positive"),
    ],
)
def test_placement_errors(args: list[str], gpus: int, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _plan(args, gpus)


def test_file_names_carry_vocab_and_placement() -> None:
    """Runs that differ in V, dtype or placement never overwrite each other."""

    def stem(args: list[str], gpus: int) -> str:
        cfg, p = parse(args), _plan(args, gpus)
        ctx = SimpleNamespace(cfg=cfg, world=p.tp)
        return Path(report.stem(ctx, {"placement": p.tag})).name

    names = {
        stem(["--tp", "2"], 2),
        stem(["--tp", "2", "--vocab", "151552,129280"], 2),
        stem(["--tp", "2", "--vocab", "129280"], 2),
        stem(["--tp", "2", "--dtype", "fp16"], 2),
        stem(["--tp", "4", "--ranks-per-gpu", "2"], 2),
        stem(["--tp", "2"], 0),
        stem(["--tp", "2", "--colocate"], 2),
    }
    assert len(names) == 7
    assert "bench_tp2_2gpu_bf16_V151552-129280" in names
    assert "bench_tp4_2gpu-2pergpu-latency-only_bf16_V151552" in names
    assert "bench_tp2_1gpu-2pergpu-latency-only_bf16_V151552" in names


def test_methods_that_time_nothing_are_refused() -> None:
    with pytest.raises(UsageError, match="times nothing"):
        parse(["--methods", "limit"])
    assert parse(["--methods", "ours_checked,limit"]).methods == ("ours_checked", "limit")
    assert "ours_checked" not in parse([]).methods  # opt-in


def _rows(ours: list[float], stock: list[float] | None = None) -> list[dict]:
    rows = []
    for m, o in zip((1, 64), ours, strict=True):
        dev = {"ours": {"median": o}}
        if stock:
            dev["stock"] = {"median": stock[len(rows)]}
            dev["nccl_symm"] = {"median": stock[len(rows)] * 0.9}
        rows.append(
            {"m": m, "egress_bytes": m * 300_000, "device_us": dev, "graph_us": {}, "host_us": {}}
        )
    return rows


def _found(floor: float = 2.0, gbps: float = 300.0) -> dict:
    return {
        "barrier": {"status": "ok", "us": floor, "source": "probe"},
        "push": {"status": "ok", "gbps": gbps, "candidates_gbps": {"copy_": gbps}},
    }


def test_limit_is_clipped_and_the_raw_value_kept() -> None:
    rows = _rows([2.5, 40.0])  # M=1 beats floor + egress / bandwidth = 3 µs
    lim = limit.derive(rows, _found(), _plan(["--tp", "2"], 2), parse([]))
    assert lim["status"] == "ok" and lim["gbps"] >= 300.0
    first, second = rows
    assert first["limit_us"] == pytest.approx(2.0 + 300_000 / lim["gbps"] / 1e3)
    assert first["pct_of_limit"] == 100.0 and first["pct_clipped"]
    assert first["pct_of_limit_raw"] > 100.0
    assert 0 < second["pct_of_limit"] <= 100.0
    res = {
        "vocab": 1024,
        "dtype": "bf16",
        "columns_per_rank": 512,
        "rows": rows,
        "limit": lim,
        "methods": {"ours": {"status": "ok"}},
    }
    table = "\n".join(report.device_table(res))
    assert "100%*" in table and report.CLIP_NOTE in table


@pytest.mark.parametrize(
    "args, gpus, word",
    [
        (["--tp", "2"], 0, "CPU"),
        (["--tp", "4", "--ranks-per-gpu", "2"], 2, "LATENCY ONLY"),
        (["--tp", "2", "--methods", "ours"], 2, "excludes limit"),
    ],
)
def test_limit_is_na_where_it_means_nothing(args: list[str], gpus: int, word: str) -> None:
    rows = _rows([2.5, 40.0])
    lim = limit.derive(rows, _found(), _plan(args, gpus), parse(args))
    assert lim["status"] == "n/a" and word in lim["reason"]
    assert all(r["pct_of_limit"] is None and r["limit_us"] is None for r in rows)


def test_targets_met_missed_and_not_measured() -> None:
    rows = _rows([5.0, 30.0], stock=[10.0, 100.0])
    rows[0]["graph_us"] = {
        "ours": {"status": "ok", "median": 5.0},
        "stock": {"status": "ok", "median": 6.0},
    }
    lim = limit.derive(rows, _found(floor=4.6, gbps=1000.0), _plan(["--tp", "2"], 2), parse([]))
    res = {"rows": rows, "limit": lim}
    got = {c["target"]: c["status"] for c in targets.device(res)}
    assert got["ours/stock at M=1 <= 0.60 (device time)"] == "met"  # 0.50
    assert got["ours/stock at M=64 <= 0.38 (device time)"] == "met"  # 0.30
    assert got["ours/stock at M=1 under graph replay <= 0.55"] == "MISSED"  # 0.83
    assert got["faster than nccl_symm at every M"] == "met"
    assert set(got.values()) <= {"met", "MISSED"}
    del rows[1]["device_us"]["stock"]
    res["limit"] = {"status": "n/a", "reason": "CPU run"}
    got = {c["target"]: c for c in targets.device(res)}
    assert got["ours/stock at M=64 <= 0.38 (device time)"]["status"] == "not measured"
    assert "CPU run" in got[">= 90% of the limit at every M"]["why"]


def test_world_size_one_probe_keys_buffers_by_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two vocabularies at the same M once reused one buffer and crashed."""
    from logits_gather.bench.gather import side as probes

    calls = []
    monkeypatch.setattr(
        probes,
        "ALL_GATHER",
        lambda out, x, group: calls.append((tuple(out.shape), tuple(x.shape))) or out.copy_(x),
    )
    ws1 = probes.WorldSizeOne.__new__(probes.WorldSizeOne)
    ws1.sub, ws1._out = None, {}
    clock = SimpleNamespace(
        wall=lambda fn, xs: [fn(x) for x in xs] and 0.0,
        host=lambda fn, xs, guess: [fn(x) for x in xs] and 1.0,
    )
    for columns in (512, 256):
        for dtype in (torch.float32, torch.bfloat16):
            xs = [torch.randn(4, columns).to(dtype) for _ in range(2)]
            assert set(ws1.host_costs(clock, xs, 3)) == {"nccl_ag_ws1", "stock_ws1"}
    assert all(o == i for o, i in calls)


def test_imports_are_one_way() -> None:
    """worker and plan never import the launcher; the probes never import our kernel."""

    def imports(name: str) -> set[str]:
        tree = ast.parse((BENCH / name).read_text())
        return {
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        } | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}

    for name in ("worker.py", "plan.py", "preflight.py", "cli.py"):
        assert "ranks" not in imports(name), name
    for name in ("gather/barrier_probe.py", "gather/push_probe.py", "gather/limit.py"):
        assert not any("kernel" in m or m.endswith("push") for m in imports(name)), name


def test_spread_target_across_runs(tmp_path: Path) -> None:
    from logits_gather.bench.gather import spread

    def doc(mode: str, tp: int, us: float | None) -> dict:
        graph = {"ours": {"status": "ok", "median": us}} if us else {}
        return {
            "machine": {"mode": mode, "tp": tp},
            "results": [{"vocab": 151552, "rows": [{"m": 1, "graph_us": graph}]}],
        }

    assert "not measured" in spread.compare(tmp_path)[1]
    (tmp_path / "bench_tp2_2gpu_bf16_V151552.json").write_text(json.dumps(doc("nccl", 2, 5.0)))
    (tmp_path / "bench_tp8_x.json").write_text(json.dumps(doc("spread", 8, 9.0)))
    (tmp_path / "bench_tp4_x.json").write_text(json.dumps(doc("spread", 4, 6.0)))
    text = "\n".join(spread.compare(tmp_path))
    assert "tp=8 spread 9.00 µs / tp=2 5.00 µs (V=151552) = 1.80x: MISSED" in text
    assert "tp=4 spread 6.00 µs / tp=2 5.00 µs (V=151552) = 1.20x: for information" in text
    (tmp_path / "bench_tp8_x.json").write_text(json.dumps(doc("spread", 8, 7.5)))
    assert "= 1.50x: met" in "\n".join(spread.compare(tmp_path))


def _summary(us: float) -> dict:
    return {
        "median": us,
        "passes": [us, us],
        "spread_pct": 1.0,
        "per_rank": [us, us],
        "worst_rank": 0,
    }


def test_gpu_report_from_synthetic_results(tmp_path: Path, capsys) -> None:
    """The GPU-only branches of the report (host table, graph columns, targets, check
    cost, file names, JSON) on figures shaped like a tp=2 NVLink run's."""
    args = [
        "--tp",
        "2",
        "--rows",
        "1,64",
        "--methods",
        "stock,nccl_symm,ce_pull,ours,ours_checked,limit",
        "--out",
        str(tmp_path),
    ]
    cfg, p = parse(args), _plan(args, 2)
    names = ("stock", "nccl_symm", "ce_pull", "ours", "ours_checked")
    rows = []
    for m, base in ((1, 8.0), (64, 80.0)):
        dev = {
            n: {**_summary(base * f), "iters": 20, "bursts": 5}
            for n, f in zip(names, (1.0, 1.1, 2.0, 0.6, 0.7), strict=True)
        }
        host = {
            n: _summary(h)
            for n, h in (
                ("ours", 12.0),
                ("stock", 90.0),
                ("ours_checked", 40.0),
                ("nccl_ag_ws1", 45.0),
                ("stock_ws1", 80.0),
            )
        }
        graph = {
            n: {
                "status": "ok",
                **_summary(base * f),
                "calls_per_graph": 8,
                "replays": 10,
                "vs_eager": 1.1,
            }
            for n, f in (("ours", 0.5), ("stock", 1.2))
        }
        rows.append(
            {
                "m": m,
                "egress_bytes": m * 151552,
                "device_us": dev,
                "host_us": host,
                "graph_us": graph,
            }
        )
    lim = limit.derive(rows, _found(floor=3.0, gbps=360.0), p, cfg)
    status = {n: {"status": "ok", "detail": "synthetic"} for n in names}
    status["limit"] = {"status": "ok", "reason": None, "detail": "measured ceiling"}
    res = {
        "vocab": 151552,
        "columns_per_rank": 75776,
        "dtype": "bf16",
        "methods": status,
        "nccl_kernels": {"symmetric": "yes, at every M"},
        "limit": lim,
        "rows": rows,
        "ws1": "ok",
    }
    info = {
        "tp": 2,
        "mode": p.mode,
        "placement": p.tag,
        "latency_only": p.shared,
        "gpu_count": 2,
        "gpu_name": "H200",
        "hostname": "h",
        "mps_pipe": False,
    }
    ctx = SimpleNamespace(cfg=cfg, world=2, cuda=True)
    report.finish(info, ctx, [res])
    text = capsys.readouterr().out
    assert "ours_checked host" in text and "stock graph/eager" in text
    assert (
        "check_calls cost (ours_checked - ours, µs per call): M=1: device +0.80, host +28.00"
        in text
    )
    assert "ours/stock at M=1 <= 0.60 (device time): MISSED (0.60)" not in text
    assert "ours/stock at M=1 under graph replay <= 0.55: met (0.42)" in text
    assert "faster than nccl_symm at every M: met" in text
    assert "ours 12.00 µs per eager call <= 5 µs: MISSED" in text
    doc = json.loads((tmp_path / "bench_tp2_2gpu_bf16_V151552.json").read_text())
    checks = doc["results"][0]["targets"]["device"]
    assert len(checks) == 6 and all(c["status"] in ("met", "MISSED") for c in checks)
    assert (tmp_path / "bench_tp2_2gpu_bf16_V151552.txt").read_text().count("targets") >= 2
