"""Placement: how the ranks map onto the machine, and the environment each rank needs.

* ``cpu``: no GPU visible; gloo ranks on the CPU.
* ``nccl``: one rank per GPU, NCCL process group: the only placement whose timings
  are tp=N figures (bandwidth and latency).
* ``spread``: several ranks per GPU, rank r on GPU ``r % G`` (``--ranks-per-gpu R``,
  ``G = tp / R``). NCCL refuses several ranks on one GPU, so the process group is
  gloo and ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` is set. Flags still cross
  GPUs, but the ranks share SMs and links: LATENCY ONLY.
* ``colocated``: every rank on cuda:0 (``--colocate``, or only one GPU visible): the
  spread placement with ``G = 1``; no peer store leaves the GPU.

Imported by the entry points and the worker; imports none of them (imports stay one-way).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .cli import BenchConfig, UsageError, check_divisible

NVLS_OFF = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
}
OVERLAP_ENV = "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"
SHARED_NCCL = (
    "NCCL refuses several ranks on one GPU (ranks share GPUs in this run; the "
    "process group is gloo)"
)
LATENCY_ONLY = (
    "LATENCY ONLY: ranks share GPUs, so they share SMs and links; these are not "
    "tp={tp} bandwidth figures"
)


@dataclass(frozen=True)
class Plan:
    """How the ranks map onto the machine."""

    mode: str  # "nccl" | "spread" | "colocated" | "cpu"
    tp: int
    gpus: int  # visible GPUs
    torchrun: bool
    gpus_used: int = 0  # GPUs the ranks of this host are spread over (0 on CPU)
    ranks_per_gpu: int = 0

    @property
    def shared(self) -> bool:
        """Several ranks per GPU: gloo, overlapping symmetric memory, latency only."""
        return self.mode in ("spread", "colocated")

    @property
    def pg_backend(self) -> str:
        return "nccl" if self.mode == "nccl" else "gloo"

    @property
    def tag(self) -> str:
        """The placement as it appears in file names."""
        if self.mode == "cpu":
            return "cpu"
        if self.mode == "nccl":
            return f"{self.gpus_used}gpu"
        return f"{self.gpus_used}gpu-{self.ranks_per_gpu}pergpu-latency-only"

    def device(self, local_rank: int) -> torch.device:
        if self.mode == "cpu":
            return torch.device("cpu")
        return torch.device("cuda", local_rank % max(1, self.gpus_used))


def _visible_gpus() -> int:
    # NVML-based count: does not initialise CUDA in the parent
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_ranks(
    cfg: BenchConfig, env: Mapping[str, str] = os.environ, gpus: int | None = None
) -> Plan:
    torchrun = "RANK" in env and "WORLD_SIZE" in env
    world = int(env["WORLD_SIZE"]) if torchrun else None
    if torchrun and cfg.tp is not None and cfg.tp != world:
        raise UsageError(f"--tp {cfg.tp} disagrees with WORLD_SIZE={world} set by torchrun")
    gpus = _visible_gpus() if gpus is None else gpus
    per = cfg.ranks_per_gpu
    if gpus == 0:
        if per is not None:
            raise UsageError(f"--ranks-per-gpu {per} needs GPUs; none is visible")
        tp = world or cfg.tp or 2
        return _done(cfg, Plan(mode="cpu", tp=tp, gpus=0, torchrun=torchrun))
    if cfg.colocate and per is not None:
        raise UsageError(
            "--colocate and --ranks-per-gpu exclude each other (--colocate puts "
            "every rank on cuda:0)"
        )
    tp = world or cfg.tp or (gpus * per if per else gpus if gpus > 1 else 2)
    local = int(env.get("LOCAL_WORLD_SIZE", tp)) if torchrun else tp
    if cfg.colocate or (gpus == 1 and per is None):
        used = 1
    elif per is not None:
        if local % per:
            raise UsageError(f"--ranks-per-gpu {per} does not divide the {local} ranks per host")
        used = local // per
        if used > gpus:
            raise UsageError(
                f"{local} ranks at --ranks-per-gpu {per} need {used} GPUs, {gpus} are visible"
            )
    else:
        used = local
        if used > gpus:
            raise UsageError(
                f"--tp {local} needs {local} GPUs per host, {gpus} are visible; "
                f"pass --ranks-per-gpu {-(-local // gpus)} to spread the ranks "
                "over the GPUs (latency only), or --colocate"
            )
    mode = "nccl" if used == local else "colocated" if used == 1 else "spread"
    return _done(
        cfg,
        Plan(
            mode=mode,
            tp=tp,
            gpus=gpus,
            torchrun=torchrun,
            gpus_used=used,
            ranks_per_gpu=-(-local // used),
        ),
    )


def _done(cfg: BenchConfig, plan: Plan) -> Plan:
    if plan.tp < (1 if cfg.head is not None else 2):
        raise UsageError(f"the run needs at least 2 ranks, got {plan.tp}")
    check_divisible(cfg.vocabs, plan.tp)
    return plan


LOADING_ENV = "CUDA_MODULE_LOADING"


def rank_env(plan: Plan) -> dict[str, str]:
    """Environment every rank needs before torch.distributed or CUDA start. Ranks that
    share a GPU also load every CUDA kernel at start: a kernel loaded on first use waits
    for the GPU to drain, and on a shared GPU that includes a peer's kernel waiting for
    this rank (``logits_gather.sampling.fused.policy.sharing_barrier``)."""
    env = dict(NVLS_OFF)
    if plan.shared:
        env[OVERLAP_ENV] = "1"
        env[LOADING_ENV] = "EAGER"
    return env
