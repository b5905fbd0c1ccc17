"""One rank of the sampling benchmark: its process group, vLLM's kernels where they
import, the measurements (``measure.py``), and rank 0's report."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .measure import measure
from .report import report

TARGET_VOCAB = 151552  # the targets are for one H200, tp=1, V=151552


def _kernels(device: str) -> tuple[Any, str]:
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return None, "vLLM's Triton kernels need a GPU here (or TRITON_INTERPRET=1 on CPU)"
    from .peers import vllm_kernels

    return vllm_kernels()


def _setup(cfg: Any, world: int, unavailable: dict[str, str]) -> dict[str, Any]:
    gpu = cfg.device == "cuda"
    placement = f"{world}gpu" if gpu else "cpu"
    where = f"sampling, tp={world}, {placement}, V={cfg.vocab}, bf16" + (
        f", {torch.cuda.get_device_name()}" if gpu else ", gloo ranks: says nothing about GPUs"
    )
    return {
        "where": where,
        "device": cfg.device,
        "tp": world,
        "vocab": cfg.vocab,
        "rows": cfg.rows,
        "profiles": list(cfg.profiles),
        "iters": cfg.iters,
        "graphs": cfg.graphs,
        "methods": ["ours", "torch"] + ([] if unavailable else ["vllm"]),
        "unavailable": unavailable,
        "stem": f"sampling_tp{world}_{placement}_bf16_V{cfg.vocab}",
        "target_note": ""
        if (gpu and world == 1 and cfg.vocab == TARGET_VOCAB)
        else "targets are for one H200, tp=1, V=151552",
    }


def run(cfg: Any, rank: int, beat: Callable[[str], None]) -> None:
    """This rank's part; rank 0 prints and writes the report. Raises on rank 0 when
    the check failed, so the run exits 1."""
    world = cfg.tp
    gpu = cfg.device == "cuda"
    if gpu:
        torch.cuda.set_device(rank)
    beat("init_process_group")
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world)
    kernels, why = _kernels(cfg.device)
    if rank == 0 and kernels is None:
        print(f"peer vllm unavailable, going on without it: {why}", flush=True)
    beat("measure")
    result = measure(rank, world, cfg, kernels, beat)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, result)
    problems: list[str] = []
    if rank == 0:
        beat("report")
        unavailable = {} if kernels is not None else {"vllm": why}
        text, doc = report(_setup(cfg, world, unavailable), everyone, cfg.rows, cfg.out)
        print(text, flush=True)
        problems = doc["problems"]
    dist.barrier()
    if gpu:
        torch.cuda.synchronize()
    if problems:
        raise RuntimeError("the sampling check failed: " + "; ".join(problems))
