"""``python -m logits_gather.bench`` end to end on CPU (gloo ranks, tiny sizes), as a
subprocess: exit code, table, JSON, correctness verdicts, PNG, and the failure paths."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from tests.bench.cpu import cpu_env

TINY = ["--tp", "2", "--rows", "1,3", "--vocab", "1024", "--dtype", "fp32", "--quick"]


def _run(
    args: list[str], cwd: Path, *, module: list[str] | None = None, timeout: float = 100
) -> subprocess.CompletedProcess:
    env = cpu_env()
    cmd = [sys.executable, *(module or ["-m", "logits_gather.bench"]), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _check_outputs(proc: subprocess.CompletedProcess, out: Path) -> None:
    text = proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mode: CPU, 2 gloo ranks" in text and "say nothing about GPUs or NVLink" in text
    header = [
        c.strip()
        for c in next(line for line in text.splitlines() if line.startswith("M |")).split("|")
    ]
    assert header == [
        "M",
        "stock",
        "nccl_symm",
        "ce_pull",
        "ours",
        "limit",
        "ours GB/s",
        "ours/stock",
        "% of limit",
    ]
    table_rows = [
        line.split("|")[0].strip()
        for line in text.splitlines()
        if line.split("|")[0].strip().isdigit()
    ]
    assert table_rows == ["1", "3"]
    assert "WRONG" not in text

    doc = json.loads((out / "bench_tp2_cpu_fp32_V1024.json").read_text())
    table = (out / "bench_tp2_cpu_fp32_V1024.txt").read_text()
    assert "M |" in table and "mode: CPU, 2 gloo ranks" in table and "targets" in table
    machine = doc["machine"]
    for key in ("hostname", "torch", "triton", "tp", "colocated", "mode", "gpu_count", "gpu_name"):
        assert key in machine, key
    assert (machine["tp"], machine["mode"], machine["colocated"]) == (2, "cpu", False)
    assert machine["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert doc["config"]["rows"] == [1, 3] and doc["timer"] == "perf_counter"
    (res,) = doc["results"]
    status = res["methods"]
    assert status["stock"]["status"] == "ok" and status["ours"]["status"] == "ok"
    assert "backend torch.distributed" in status["ours"]["detail"]
    assert status["nccl_symm"]["status"] == "unavailable" and status["nccl_symm"]["reason"]
    assert status["ce_pull"]["status"] == "unavailable" and "CUDA" in status["ce_pull"]["reason"]
    # the limit is a GPU ceiling: on CPU it is n/a, never a percentage (once 115%-695%)
    assert status["limit"]["status"] == "unavailable" and "CPU" in status["limit"]["reason"]
    assert res["limit"]["status"] == "n/a" and "% of limit" in text
    for row, m in zip(res["rows"], (1, 3), strict=True):
        assert row["m"] == m and row["egress_bytes"] == m * 512 * 4
        for name in ("stock", "ours"):
            timing = row["device_us"][name]
            assert timing["median"] > 0 and len(timing["per_rank"]) == 2
            assert len(timing["passes"]) == 2 and timing["spread_pct"] is not None
        assert row["limit_us"] is None and row["pct_of_limit"] is None
        assert row["ours_gbps"] > 0 and row["ours_over_stock"] > 0
    assert res["targets"]["host"]["ours_host_us"] is None  # host cost needs CUDA
    assert "not applicable: CPU run" in text
    pct_column = [
        line.split("|")[-1].strip()
        for line in text.splitlines()
        if line.split("|")[0].strip().isdigit()
    ]
    assert pct_column == ["n/a", "n/a"]

    png = out / "bench_tp2_cpu_fp32_V1024.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert "PNG skipped: matplotlib is not installed" in text
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_spawned_cpu_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _check_outputs(_run([*TINY, "--out", str(out)], tmp_path), out)


def test_under_torchrun(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run(
        [*TINY, "--out", str(out)],
        tmp_path,
        module=[
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "logits_gather.bench",
        ],
    )
    _check_outputs(proc, out)
    assert (
        json.loads((out / "bench_tp2_cpu_fp32_V1024.json").read_text())["machine"]["launcher"]
        == "torchrun"
    )


def test_vocab_not_divisible(tmp_path: Path) -> None:
    proc = _run(["--tp", "2", "--vocab", "1024,1023", "--rows", "1"], tmp_path, timeout=50)
    assert proc.returncode == 2
    assert "--vocab 1023 is not divisible by --tp 2" in proc.stderr


def test_usage_errors_exit_2_before_any_rank_starts(tmp_path: Path, capsys) -> None:
    """Each refused by the parent within seconds, before any rank is started (in-process:
    ``main`` would spawn ranks only after these checks pass)."""
    from logits_gather.bench import main

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cases = {
        "times nothing": (["--methods", "limit"], "--methods limit times nothing"),
        "unwritable --out": (["--out", str(blocker / "out")], "is not writable"),
        "too much memory": (
            ["--rows", "1,50000000", "--vocab", "1024", "--dtype", "fp32"],
            "GiB is free",
        ),
        "no GPU to spread over": (["--ranks-per-gpu", "2"], "--ranks-per-gpu 2 needs GPUs"),
    }
    for name, (args, message) in cases.items():
        assert main([*args, "--out", str(tmp_path / "ok")] if "--out" not in args else args) == 2, (
            name
        )
        err = capsys.readouterr().err
        assert message in err, (name, err)
    assert not (tmp_path / "ok").exists() or not any((tmp_path / "ok").iterdir())


def test_several_vocabs_in_one_run(tmp_path: Path) -> None:
    """Two vocabularies in one run (the world-size-1 probe once crashed on the second),
    and the opt-in ours_checked method with its cost line; the file name carries both V."""
    out = tmp_path / "out"
    proc = _run(
        [
            "--tp",
            "2",
            "--rows",
            "2",
            "--dtype",
            "fp32",
            "--quick",
            "--methods",
            "ours,ours_checked",
            "--out",
            str(out),
            "--vocab",
            "1024,512",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "check_calls cost (ours_checked - ours, µs per call): M=2:" in proc.stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        f"bench_tp2_cpu_fp32_V1024-512.{ext}" for ext in ("json", "png", "txt")
    ] or names == [f"bench_tp2_cpu_fp32_V1024-512.{ext}" for ext in ("json", "txt")]
    doc = json.loads((out / "bench_tp2_cpu_fp32_V1024-512.json").read_text())
    assert [r["vocab"] for r in doc["results"]] == [1024, 512]
    status = doc["results"][0]["methods"]
    assert list(status) == ["ours", "ours_checked"]
    assert status["ours_checked"]["status"] == "ok", status
    assert "check_calls=True" in status["ours_checked"]["detail"]


def test_failing_rank_surfaces(tmp_path: Path) -> None:
    proc = _run([*TINY, "--out", str(tmp_path), "--fail-rank", "1"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rank 1 raised" in proc.stderr
    assert "RuntimeError: --fail-rank 1: this rank fails on purpose" in proc.stderr
