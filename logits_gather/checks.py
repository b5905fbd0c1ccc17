"""Argument checks: options, per-call diagnosis and the collective construction agreement.

Construction problems are collected, not raised, so that every rank still
reaches the one collective exchange in :func:`agree`; then every rank raises
the same ``ValueError``. A rank that raised alone would leave its peers hanging
in the next collective. The per-call agreement (``check_calls``) lives in
:mod:`.calls`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
import torch.distributed as dist

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BACKENDS = ("auto", "symm_mem", "torch.distributed")
ON_TIMEOUT = ("raise", "trap")

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_ON_TIMEOUT = "trap"
TIMEOUT_ENV = "LOGITS_GATHER_TIMEOUT_S"
ON_TIMEOUT_ENV = "LOGITS_GATHER_ON_TIMEOUT"
CHECK_CALLS_ENV = "LOGITS_GATHER_CHECK_CALLS"


class PeerTimeoutError(RuntimeError):
    """A rank waited longer than ``timeout_s`` for its peers: one is dead, stalled, or
    issued a different sequence of calls."""


def resolve_options(
    timeout_s: Any, on_timeout: Any, check_calls: Any
) -> tuple[float, str, bool, list[str]]:
    """Fills ``None`` options from the environment (then the defaults) and validates them.

    Returns ``(timeout_s, on_timeout, check_calls, problems)``; on a problem the
    returned value is a usable default, so construction can still reach :func:`agree`.
    """
    problems = []
    if timeout_s is None:
        raw = os.environ.get(TIMEOUT_ENV)
        timeout_s = DEFAULT_TIMEOUT_S
        if raw is not None:
            try:
                timeout_s = float(raw)
            except ValueError:
                problems.append(f"{TIMEOUT_ENV} must be a number of seconds, got {raw!r}")
    if (
        not isinstance(timeout_s, (int, float))
        or isinstance(timeout_s, bool)
        or not 0 < timeout_s <= 2000
    ):
        problems.append(f"timeout_s must be a number of seconds in (0, 2000], got {timeout_s!r}")
        timeout_s = DEFAULT_TIMEOUT_S
    if on_timeout is None:
        on_timeout = os.environ.get(ON_TIMEOUT_ENV, DEFAULT_ON_TIMEOUT)
        if on_timeout not in ON_TIMEOUT:
            problems.append(f"{ON_TIMEOUT_ENV} must be one of {ON_TIMEOUT}, got {on_timeout!r}")
            on_timeout = DEFAULT_ON_TIMEOUT
    elif on_timeout not in ON_TIMEOUT:
        problems.append(f"on_timeout must be one of {ON_TIMEOUT}, got {on_timeout!r}")
        on_timeout = DEFAULT_ON_TIMEOUT
    if check_calls is None:
        raw = os.environ.get(CHECK_CALLS_ENV, "0")
        if raw not in ("0", "1", ""):
            problems.append(f"{CHECK_CALLS_ENV} must be 0 or 1, got {raw!r}")
        check_calls = raw == "1"
    elif not isinstance(check_calls, bool):
        problems.append(f"check_calls must be a bool or None, got {check_calls!r}")
        check_calls = False
    return float(timeout_s), on_timeout, check_calls, problems


def resolve_device(device: Any) -> tuple[torch.device | Any, list[str]]:
    """``device`` as a full ``torch.device`` (CUDA with its index), or the problems."""
    if device is None:
        cuda = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else "cpu"
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        return device, [f"device must name a torch device, got {device!r} ({exc})"]
    if resolved.type == "meta":
        return device, [f"device must hold data (cpu or cuda), got {device!r}"]
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA support (a CPU-only build)"
                if torch.version.cuda is None
                else "torch sees no CUDA GPU (no driver, or CUDA_VISIBLE_DEVICES hides them)"
            )
            return device, [f"device={device!r} asks for CUDA, but there is no CUDA here: {why}"]
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
        if not resolved.index < torch.cuda.device_count():
            return device, [
                f"device={device!r} names {resolved}, which does not exist "
                f"({torch.cuda.device_count()} CUDA devices are visible)"
            ]
    return resolved, []


def construction_problems(
    columns: Any, capacity: Any, dtype: Any, backend: Any, graphs: Any
) -> list[str]:
    problems = []
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        problems.append(f"columns must be a positive int, got {columns!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        problems.append(f"capacity must be a positive int, got {capacity!r}")
    if dtype not in DTYPES:
        problems.append(f"dtype must be one of {', '.join(map(str, DTYPES))}, got {dtype!r}")
    if backend not in BACKENDS:
        problems.append(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(graphs, bool):
        problems.append(f"graphs must be a bool, got {graphs!r}")
    return problems


def on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """The context that collectives and allocations for ``device`` run in: its CUDA
    device (NCCL's object collectives and symmetric memory use the current one)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def agree(
    group: dist.ProcessGroup | None,
    record: dict[str, Any],
    problems: list[str],
    extra: Any = None,
    what: str = "LogitsGather construction",
) -> list[Any]:
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
        raise ValueError(f"{what} failed on every rank:\n  " + "\n  ".join(lines))
    return [g[2] for g in gathered]


def shard_error(
    shard: Any, *, columns: int, capacity: int, dtype: torch.dtype, device: torch.device
) -> Exception:
    """The exception for a shard that failed the fast check, naming what is wrong."""
    if not isinstance(shard, torch.Tensor):
        return TypeError(f"shard must be a torch.Tensor, got {type(shard).__name__}")
    if shard.dtype != dtype:
        return TypeError(f"shard.dtype must be {dtype} (as constructed), got {shard.dtype}")
    if shard.dim() != 2:
        return ValueError(
            f"shard must be 2-D [M, {columns}], got {shard.dim()}-D shape {tuple(shard.shape)}"
        )
    if shard.device != device:
        return ValueError(
            f"shard.device must be {device} (this object's device), got {shard.device}"
        )
    if shard.shape[1] != columns:
        return ValueError(f"shard.shape[1] must equal columns={columns}, got {shard.shape[1]}")
    m = shard.shape[0]
    if not 1 <= m <= capacity:
        return ValueError(f"shard.shape[0] (M) must be in 1..{capacity} (capacity), got {m}")
    if not shard.is_contiguous():
        return ValueError(
            f"shard must be contiguous, got strides {shard.stride()} for shape {tuple(shard.shape)}"
        )
    return ValueError(f"shard {tuple(shard.shape)} {shard.dtype} on {shard.device} was rejected")
