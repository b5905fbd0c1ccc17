"""Where a multi-rank GPU run's ranks go (the GPU tests and ``scripts/sweep.py``).

``one-gpu``: every rank on cuda:0; ``per-gpu``: rank r on cuda:r; ``spread``: rank r on
GPU r % G. Ranks that share a GPU need :data:`COLOCATE_ENV`."""

from __future__ import annotations

import torch

COLOCATE_ENV = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1", "CUDA_MODULE_LOADING": "EAGER"}
"""Ranks that share a GPU: symmetric memory across processes on one device, and torch's
kernels loaded at start. Loaded lazily, a kernel's first use waits for the GPU to drain,
a peer's kernel that waits for this rank included (``logits_gather.sampling.fused.policy``)."""
PLACEMENTS = ("one-gpu", "per-gpu", "spread")


def gpus() -> int:
    """How many CUDA devices this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def placement_env(placement: str) -> dict[str, str]:
    return {} if placement == "per-gpu" else dict(COLOCATE_ENV)


def rank_device(rank: int, placement: str) -> torch.device:
    """The rank's GPU for ``placement`` (one of PLACEMENTS)."""
    index = {"one-gpu": 0, "per-gpu": rank, "spread": rank % max(1, gpus())}[placement]
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    return device
