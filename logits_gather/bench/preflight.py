"""Checks that fail a run within seconds instead of after it: ``--out`` must be
writable, and the run's memory must fit.

Memory per rank is estimated from the configuration (bytes, summed over the
vocabularies, since every method's buffers are kept until the run ends: see
``gather/side.py``'s ``KEPT``). With ``U = capacity * V * bytes`` (one full ``[capacity, V]``
output) and ``S = --sets``:

* inputs: every rank builds every rank's shards, ``S * U``, plus one expected output;
* stock: ``[tp*M, N]`` staging plus the permuted copy, ``2U``, and under graph
  capture ``--graph-calls`` of each, ``2 * graph_calls * U``;
* nccl_symm: ``S`` input sets of ``U / tp`` plus staging and the permute, ``2U``;
* ce_pull: ``S * U / tp`` inputs, its output and the permute, ``2U``;
* ours (and ours_checked): five ``[capacity, V]`` slots, ``5U``;
* the push probe: ``tp * limit_mib / (tp - 1)`` MiB.

Ranks that share a GPU multiply it. The parent compares the estimate with
``nvidia-smi``'s free memory (it must not initialise CUDA) or, on CPU, with
``MemAvailable``; every rank compares it again with ``torch.cuda.mem_get_info``
before it allocates.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from .cli import BenchConfig, UsageError
from .machine import nvidia_smi_rows

HEADROOM = 0.9  # of free memory the run may plan to use
CONTEXT_MIB = 600  # CUDA context, NCCL and Triton per process, roughly


def check_out(out: str) -> None:
    """Creates ``out`` and writes a probe file there, or raises UsageError."""
    probe = os.path.join(out, f".bench-write-probe-{os.getpid()}")  # torchrun: one per rank
    try:
        os.makedirs(out, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok\n")
        os.remove(probe)
    except OSError as exc:
        raise UsageError(
            f"--out {out!r} is not writable ({type(exc).__name__}: "
            f"{exc.strerror or exc}); nothing was run"
        ) from None


def estimate(cfg: BenchConfig, tp: int, cuda: bool) -> dict[str, int]:
    """Bytes one rank needs, by item."""
    item = {"bf16": 2, "fp16": 2, "fp32": 4}[cfg.dtype]
    if cfg.head is not None:
        return _head_estimate(cfg, tp, cuda, item)
    units = {}
    for v in cfg.vocabs:
        u = cfg.capacity * v * item
        add = {"inputs": (cfg.sets + 1) * u}
        if "stock" in cfg.methods:
            add["stock"] = 2 * u * (1 + (cfg.graph_calls if cuda and cfg.graphs else 0))
        if "nccl_symm" in cfg.methods and cuda:
            add["nccl_symm"] = cfg.sets * u // tp + 2 * u
        if "ce_pull" in cfg.methods and cuda:
            add["ce_pull"] = cfg.sets * u // tp + 2 * u
        for name in ("ours", "ours_checked"):
            if name in cfg.methods:
                add[name] = 5 * u
        for k, b in add.items():
            units[k] = units.get(k, 0) + b
    if "limit" in cfg.methods:
        units["push probe"] = tp * cfg.limit_mib * 2**20 // (tp - 1)
    if cuda:
        units["context"] = CONTEXT_MIB * 2**20
    return units


def _head_estimate(cfg: BenchConfig, tp: int, cuda: bool, item: int) -> dict[str, int]:
    """``--head H``: this rank's weight and one regenerated peer weight for the check,
    ours' five slots and stock's two buffers, the checked outputs of every M (four
    methods) and the fp32 reference block."""
    v = max(cfg.vocabs)
    columns = v // tp
    units = {
        "weights": 2 * columns * cfg.head * item,
        "gather buffers": 7 * cfg.capacity * v * item,
        "checked outputs": 4 * sum(cfg.rows) * v * item,
        "fp32 reference": 3 * cfg.capacity * columns * 4 + cfg.sets * cfg.capacity * cfg.head * 4,
    }
    if cuda:
        units["context"] = CONTEXT_MIB * 2**20
    return units


def describe(need: dict[str, int], per_device: int, free: int, where: str) -> str:
    items = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in need.items())
    rank = sum(need.values())
    return (
        f"the run needs about {rank * per_device / 2**30:.1f} GiB on each {where} "
        f"({per_device} rank(s) there x {rank / 2**30:.1f} GiB; per rank: {items}) and "
        f"{free / 2**30:.1f} GiB is free; lower --rows (capacity = max M), --sets, "
        "--graph-calls or the number of --vocab values"
    )


def _gpu_free_bytes() -> int | None:
    """The least free memory over the visible GPUs, from nvidia-smi (no CUDA init)."""
    try:
        rows = nvidia_smi_rows("index,memory.free", units=False)
        free = {int(i): int(f) for i, f in rows}
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible and all(v.strip().isdigit() for v in visible.split(",")):
        free = {i: f for i, f in free.items() if str(i) in visible.split(",")} or free
    return min(free.values()) * 2**20 if free else None


def _host_free_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(cfg: BenchConfig, plan: Any) -> None:
    """Parent side: refuses a run that cannot fit, before any rank starts."""
    cuda = plan.mode != "cpu"
    need = estimate(cfg, plan.tp, cuda)
    per = plan.ranks_per_gpu if cuda else plan.tp
    free = _gpu_free_bytes() if cuda else _host_free_bytes()
    if free is not None and sum(need.values()) * per > HEADROOM * free:
        raise UsageError(describe(need, per, free, "GPU" if cuda else "host"))


def check_rank(ctx: Any) -> None:
    """Rank side, before any allocation: the same estimate against mem_get_info."""
    if not ctx.cuda:
        return
    import torch

    need = estimate(ctx.cfg, ctx.world, True)
    need.pop("context")
    free, _ = torch.cuda.mem_get_info(ctx.device)
    per = max(1, ctx.plan.ranks_per_gpu)
    if sum(need.values()) * per > HEADROOM * free:
        raise MemoryError(describe(need, per, free, "GPU"))
