"""What the run ran on: GPUs, driver, library versions, host, and how the ranks were placed."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from typing import Any

import torch


def _version(dist_name: str) -> str | None:
    try:
        return metadata.version(dist_name)
    except metadata.PackageNotFoundError:
        return None


def nvidia_smi_rows(query: str, units: bool = True) -> list[list[str]]:
    """The rows of ``nvidia-smi --query-gpu=QUERY`` (CSV, no header), one per GPU, fields
    stripped; raises ``OSError`` or ``subprocess.SubprocessError`` when it cannot run."""
    fmt = "--format=csv,noheader" + ("" if units else ",nounits")
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", fmt],
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    ).stdout
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line]


def _nvidia_smi() -> dict[str, Any]:
    try:
        rows = nvidia_smi_rows("name,driver_version,memory.total")
    except (OSError, subprocess.SubprocessError) as exc:
        return {"nvidia_smi": f"unavailable ({type(exc).__name__})"}
    return {"nvidia_smi": rows, "driver": rows[0][1] if rows and len(rows[0]) > 1 else None}


def mps_running() -> bool:
    """Whether an MPS control daemon runs (its pipe directory holds a ``control`` socket);
    without MPS, colocated kernels are time-sliced and every call costs milliseconds."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipe, "control"))


def describe(ctx: Any) -> dict[str, Any]:
    plan = ctx.plan
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda_runtime": torch.version.cuda,
        "mode": plan.mode,
        "colocated": plan.mode == "colocated",
        "placement": plan.tag,
        "latency_only": plan.shared,
        "gpus_used": plan.gpus_used,
        "ranks_per_gpu": plan.ranks_per_gpu,
        "tp": ctx.world,
        "process_group": plan.pg_backend,
        "launcher": "torchrun" if plan.torchrun else "spawn",
        "gpu_count": plan.gpus,
        "env": {
            k: os.environ.get(k)
            for k in (
                "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                "NCCL_NVLS_ENABLE",
                "NVSHMEM_DISABLE_NVLS",
                "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES",
                "NCCL_WIN_ENABLE",
                "CUDA_VISIBLE_DEVICES",
            )
        },
    }
    try:
        import logits_gather

        info["logits_gather"] = logits_gather.__version__
    except Exception:  # noqa: BLE001 - only informative
        info["logits_gather"] = None
    if ctx.cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        info.update(
            gpu_name=props.name,
            sms=props.multi_processor_count,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            mps_pipe=mps_running(),
        )
        try:
            version = torch.cuda.nccl.version()
            info["nccl"] = (
                ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
            )
        except Exception as exc:  # noqa: BLE001
            info["nccl"] = f"unknown ({type(exc).__name__})"
        info.update(_nvidia_smi())
    else:
        info.update(
            gpu_name=None, cpu=platform.processor() or platform.machine(), cpu_count=os.cpu_count()
        )
    return info
