"""The read limit of the sampling benchmark: the rank's shard read once at the device's
copy bandwidth, measured in the same run.

Bandwidth: ``dst.copy_(src)`` of one large buffer on the rank's device (512 MiB on a
GPU, 64 MiB on CPU), timed with the benchmark's clock (CUDA events after a spin; wall
clock on CPU) over a burst of copies, counting the bytes read plus the bytes written,
as the gather benchmark's limit counts what moves. The slowest rank sets the run's
figure. ``read limit(M) = M * V/tp * 2 bytes (bf16) / bandwidth``, and the table gives
``ours / read limit``: how many reads of the shard ours costs (at least 1 in principle).
On CPU the figure is the host's memory bandwidth and as unrepresentative as every
other CPU timing.
"""

from __future__ import annotations

from typing import Any

import torch

GPU_BYTES, CPU_BYTES = 512 * 2**20, 64 * 2**20
COPIES = 5


def copy_bandwidth(clock: Any, device: torch.device) -> dict[str, Any]:
    """This rank's copy bandwidth in GB/s (read + written). Collective (the clock
    lines the ranks up before the burst)."""
    nbytes = GPU_BYTES if device.type == "cuda" else CPU_BYTES
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(2):  # warm up
        dst.copy_(src)
    us = clock.burst(lambda _x: dst.copy_(src), [None] * COPIES, 0.0)
    return {"gbps": 2 * nbytes / (us * 1e3), "bytes": nbytes, "copies": COPIES, "us": us}


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's bandwidth: the slowest rank's, with every rank's figure."""
    worst = min(per_rank, key=lambda r: r["gbps"])
    return {
        "gbps": worst["gbps"],
        "per_rank_gbps": [r["gbps"] for r in per_rank],
        "bytes": worst["bytes"],
        "definition": "dst.copy_(src) on the rank's device, (read + written bytes) / time; "
        "read limit = shard bytes / this",
    }


def read_limit_us(m: int, columns: int, gbps: float, itemsize: int = 2) -> float:
    """µs to read an ``[m, columns]`` shard once at ``gbps``."""
    return m * columns * itemsize / (gbps * 1e3)
