"""Argument checks: per-call diagnosis and the collective construction agreement.

Construction problems are collected, not raised, so that every rank still
reaches the one collective exchange in :func:`agree`; then every rank raises
the same ``ValueError``. A rank that raised alone would leave its peers hanging
in the next collective.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BACKENDS = ("auto", "symm_mem", "torch.distributed")


class PeerTimeoutError(RuntimeError):
    """A CTA waited longer than ``timeout_s`` for its peers: one is dead or stalled."""


def construction_problems(columns: Any, capacity: Any, dtype: Any, backend: Any,
                          timeout_s: Any) -> list[str]:
    problems = []
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        problems.append(f"columns must be a positive int, got {columns!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        problems.append(f"capacity must be a positive int, got {capacity!r}")
    if dtype not in DTYPES:
        problems.append(f"dtype must be one of {', '.join(map(str, DTYPES))}, got {dtype!r}")
    if backend not in BACKENDS:
        problems.append(f"backend must be one of {BACKENDS}, got {backend!r}")
    if (not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool)
            or not 0 < timeout_s <= 2000):
        problems.append(f"timeout_s must be a number of seconds in (0, 2000], got {timeout_s!r}")
    return problems


def agree(group: dist.ProcessGroup | None, record: dict[str, Any], problems: list[str],
          extra: Any = None) -> list[Any]:
    """Exchanges ``(record, problems, extra)`` with every rank of ``group``.

    Raises the same ``ValueError`` on every rank if any rank reported a problem
    or if any field of ``record`` differs between ranks. Returns every rank's
    ``extra`` in rank order.
    """
    world = dist.get_world_size(group)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (record, problems, extra), group=group)
    lines = []
    for rank, (_, theirs, _) in enumerate(gathered):
        lines += [f"rank {rank}: {p}" for p in theirs]
    for key in record:
        values = [g[0].get(key) for g in gathered]
        if any(v != values[0] for v in values):
            per_rank = ", ".join(f"rank {r}={v!r}" for r, v in enumerate(values))
            lines.append(f"{key} differs between ranks: {per_rank}")
    if lines:
        raise ValueError("LogitsGather construction failed on every rank:\n  " + "\n  ".join(lines))
    return [g[2] for g in gathered]


def shard_error(shard: Any, *, columns: int, capacity: int, dtype: torch.dtype,
                device: torch.device) -> Exception:
    """The exception for a shard that failed the fast check, naming what is wrong."""
    if not isinstance(shard, torch.Tensor):
        return TypeError(f"shard must be a torch.Tensor, got {type(shard).__name__}")
    if shard.dtype != dtype:
        return TypeError(f"shard.dtype must be {dtype} (as constructed), got {shard.dtype}")
    if shard.dim() != 2:
        return ValueError(
            f"shard must be 2-D [M, {columns}], got {shard.dim()}-D shape {tuple(shard.shape)}")
    if shard.device != device:
        return ValueError(f"shard.device must be {device}, got {shard.device}")
    if shard.shape[1] != columns:
        return ValueError(f"shard.shape[1] must equal columns={columns}, got {shard.shape[1]}")
    m = shard.shape[0]
    if not 1 <= m <= capacity:
        return ValueError(f"shard.shape[0] (M) must be in 1..{capacity} (capacity), got {m}")
    if not shard.is_contiguous():
        return ValueError(
            f"shard must be contiguous, got strides {shard.stride()} for shape "
            f"{tuple(shard.shape)}")
    return ValueError(f"shard {tuple(shard.shape)} {shard.dtype} on {shard.device} was rejected")
