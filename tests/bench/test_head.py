"""``python -m logits_gather.bench --head H`` end to end on CPU (gloo ranks, tiny sizes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.cpu import cpu_env

TINY = ["--head", "64", "--rows", "1,3", "--vocab", "1024", "--dtype", "fp32", "--quick"]
TIMED = ["head alone", "fused", "cublas+ours", "cublas+stock"]
SHOWN = [t.replace("cublas", "F.linear") for t in TIMED]  # CPU: no cuBLAS


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = cpu_env()
    cmd = [sys.executable, "-m", "logits_gather.bench", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("tp", [1, 2])
def test_head_run(tmp_path: Path, tp: int) -> None:
    out = tmp_path / "out"
    proc = _run(["--tp", str(tp), *TINY, "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert f"mode: CPU, {tp} gloo ranks" in text and "LOWER IS BETTER" in text
    header = [
        c.strip()
        for c in next(line for line in text.splitlines() if line.startswith("M |")).split("|")
    ]
    assert header[:5] == ["M", *SHOWN] and "wall-clock µs (CPU)" in text
    assert "fused/head alone" in header and "fused/F.linear+ours" in header
    assert header[-1] == "linear's path"
    rows = [ln for ln in text.splitlines() if ln.split("|")[0].strip().isdigit()]
    assert [r.split("|")[0].strip() for r in rows] == ["1", "3"]
    assert all("F.linear+gather" in r for r in rows)  # CPU: never the fused kernel
    assert "WRONG" not in text
    stem = f"head_tp{tp}_cpu_fp32_H64_V1024"
    doc = json.loads((out / f"{stem}.json").read_text())
    assert doc["machine"]["tp"] == tp and doc["config"]["head"] == 64
    (res,) = doc["results"]
    assert res["columns"] == 1024 // tp and res["hidden"] == 64
    assert all(st["status"] == "ok" for st in res["methods"].values())
    for row in res["rows"]:
        assert set(row["device_us"]) == set(TIMED)
        assert all(v["median"] > 0 for v in row["device_us"].values())
    assert "linear's path" in (out / f"{stem}.txt").read_text()
    if (out / f"{stem}.png").exists():
        assert (out / f"{stem}.png").stat().st_size > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--head", "0"], "--head must be a positive hidden size H, got 0"),
        (["--head", "-16"], "--head must be a positive hidden size H, got -16"),
        (["--head", "x"], "invalid int value"),
        (["--tp", "1"], "--head H allows --tp 1"),
        (["--tp", "0", "--head", "64"], "--tp must be positive, got 0"),
        (["--tp", "3", "--head", "64", "--vocab", "1024"], "not divisible by --tp 3"),
    ],
)
def test_bad_head_fails_before_any_work(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "never"
    proc = _run([*args, "--out", str(out)], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "benchmark FAILED" not in proc.stderr and not out.exists()
