"""The benchmark's GPU-only parts: the limit's probes (barrier floor, push bandwidth),
their dead-peer timeout, and ``python -m logits_gather.bench`` end to end in every
placement (one process per GPU, spread, colocated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import placements

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def _ctx(rank: int, world: int, placement: str):
    from logits_gather.bench.cli import parse
    from logits_gather.bench.plan import Plan
    from logits_gather.bench.worker import Ctx

    device = rank_device(rank, placement)
    mode = {"per-gpu": "nccl", "spread": "spread", "one-gpu": "colocated"}[placement]
    used = world if mode == "nccl" else (GPUS if mode == "spread" else 1)
    plan = Plan(
        mode=mode,
        tp=world,
        gpus=GPUS,
        torchrun=False,
        gpus_used=used,
        ranks_per_gpu=-(-world // used),
    )
    return Ctx(
        cfg=parse(["--quick"]),
        plan=plan,
        rank=rank,
        world=world,
        device=device,
        ctrl=dist.group.WORLD,
        beat=lambda _: None,
    )


def _probes(rank: int, world: int, placement: str) -> dict:
    from logits_gather.bench.gather import barrier_probe, push_probe
    from logits_gather.bench.timing import CudaClock

    ctx = _ctx(rank, world, placement)
    clock, keep = CudaClock(ctx), []
    bar = barrier_probe.barrier_latency(ctx, clock, keep)
    push = push_probe.push_bandwidth(ctx, clock, keep) if placement == "per-gpu" else None
    ctx.sync()
    ctx.barrier()
    return {"barrier": bar, "push": push}


@pytest.mark.parametrize("world, placement", placements((2, 4, 8)))
def test_limit_probes(world: int, placement: str) -> None:
    """The floor is measured (its epochs and flag counts checked inside) and plausible;
    with one process per GPU both push probes give a bandwidth."""
    results = run_ranks(_probes, world, placement, env=placement_env(placement))
    for r in results:
        bar = r["barrier"]
        assert bar["status"] == "ok", bar
        # shared GPUs without MPS time-slice: milliseconds per launch, still exact
        assert 0.3 < bar["us"] < (200.0 if placement == "per-gpu" else 100_000.0), bar
        if placement == "per-gpu":
            push = r["push"]
            assert push["status"] == "ok" and not push["problems"], push
            assert set(push["candidates_gbps"]) == {"copy_", "triton stores"}, push
            assert all(v > 1.0 for v in push["candidates_gbps"].values()), push


def _dead_peer(rank: int, world: int, placement: str) -> float:
    from logits_gather.bench.gather import barrier_probe

    ctx = _ctx(rank, world, placement)
    probe = barrier_probe.BarrierProbe(ctx)
    ctx.barrier()
    t0 = time.monotonic()
    if rank == 0:  # rank 1 never signals: the spin must give up, then later launches skip it
        probe()
        probe()
        ctx.sync()
        assert probe.timed_out() and probe.launches() == 2
    elapsed = time.monotonic() - t0
    ctx.barrier()
    return elapsed


@pytest.mark.parametrize(
    "placement",
    ["one-gpu", pytest.param("per-gpu", marks=pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs"))],
)
def test_barrier_probe_dead_peer_times_out(placement: str) -> None:
    elapsed = run_ranks(_dead_peer, 2, placement, env=placement_env(placement))[0]
    limit_s = barrier_probe_timeout_s()
    assert limit_s * 0.9 < elapsed < limit_s + 3.0, elapsed  # one timeout, not two


def barrier_probe_timeout_s() -> float:
    from logits_gather.bench.gather.barrier_probe import TIMEOUT_NS

    return TIMEOUT_NS / 1e9


def _bench(args: list[str], tmp_path: Path) -> tuple[str, dict]:
    out = tmp_path / "out"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "logits_gather.bench",
            *args,
            "--quick",
            "--out",
            str(out),
            "--stall-timeout",
            "120",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (path,) = out.glob("bench_*.json")
    assert path.with_suffix(".txt").exists()
    return proc.stdout, json.loads(path.read_text())


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_bench_one_process_per_gpu(tmp_path: Path) -> None:
    text, doc = _bench(["--tp", "2", "--rows", "1,64", "--vocab", "151552"], tmp_path)
    (res,) = doc["results"]
    assert doc["machine"]["placement"] == "2gpu" and not doc["latency_only"]
    assert all(st["status"] == "ok" for st in res["methods"].values()), res["methods"]
    assert res["limit"]["status"] == "ok" and res["limit"]["barrier"]["status"] == "ok"
    for row in res["rows"]:
        assert 0 < row["pct_of_limit"] <= 100.0
        assert row["pct_clipped"] == (row["pct_of_limit_raw"] > 100.0)
    assert [c["status"] for c in res["targets"]["device"]].count("not measured") == 0
    assert "targets (stated for tp=2" in text and "WRONG" not in text


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
def test_bench_spread_is_latency_only(tmp_path: Path) -> None:
    per = 4 // GPUS if GPUS in (2, 4) else pytest.skip("needs 2 or 4 GPUs")
    text, doc = _bench(
        ["--tp", "4", "--ranks-per-gpu", str(per), "--rows", "1,8", "--vocab", "151552"], tmp_path
    )
    (res,) = doc["results"]
    assert doc["latency_only"] and "latency-only" in doc["machine"]["placement"]
    assert "LATENCY ONLY" in text
    assert res["methods"]["stock"]["status"] == "unavailable"
    assert "NCCL refuses" in res["methods"]["nccl_symm"]["reason"]
    assert res["methods"]["ours"]["status"] == "ok"
    assert res["limit"]["status"] == "n/a" and res["limit"]["barrier"]["status"] == "ok"
    assert all(r["pct_of_limit"] is None for r in res["rows"])
    assert res["rows"][0]["graph_us"]["ours"]["status"] == "ok"
