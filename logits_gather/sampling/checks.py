"""Argument validation for the sampling operations, done locally before any collective.

Every check depends only on the arguments (and the group's world size), so
ranks given the same bad input raise the same exception before any of them
enters an exchange. Value checks (temperature range, token id range) read the
tensors on the host, one sync per call; they are skipped while a CUDA graph is
being captured and when a sampler was built with ``check_values=False``.
"""

from __future__ import annotations

from typing import Any

import torch

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MAX_TOP_N = 20


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def shard(
    x: Any,
    *,
    columns: int | None = None,
    capacity: int | None = None,
    device: torch.device | None = None,
) -> int:
    """Checks ``shard`` and returns ``M``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"shard must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"shard.dtype must be one of {', '.join(map(str, DTYPES))}, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"shard must be 2-D [M, N], got shape {tuple(x.shape)}")
    m, n = x.shape
    if m < 1 or n < 1:
        raise ValueError(f"shard must have at least one row and column, got shape {(m, n)}")
    if columns is not None and n != columns:
        raise ValueError(f"shard.shape[1] must equal the sampler's columns={columns}, got {n}")
    if capacity is not None and m > capacity:
        raise ValueError(
            f"shard.shape[0] (M) must be <= the sampler's capacity={capacity}, got {m}"
        )
    if device is not None and x.device != device:
        raise ValueError(f"shard.device must be {device}, got {x.device}")
    return m


def _row_vector(
    name: str, x: Any, m: int, device: torch.device, kind: str, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``x`` checked, as a contiguous ``dtype`` tensor on ``device`` (default: fp32 or
    int64 by ``kind``): the fused kernels index rows as ``ptr + row``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of length M={m}, got {type(x).__name__} {x!r:.40}"
        )
    floating = x.dtype.is_floating_point
    integral = not floating and not x.dtype.is_complex and x.dtype != torch.bool
    if (kind == "float" and not floating) or (kind == "int" and not integral):
        want = "a floating" if kind == "float" else "an integer"
        raise TypeError(f"{name} must have {want} dtype, got {x.dtype}")
    if x.dim() != 1 or x.shape[0] != m:
        raise ValueError(
            f"{name} must be 1-D of length M={m} (shard.shape[0]), got shape {tuple(x.shape)}"
        )
    if x.device != device and x.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU or on {device}, got {x.device}")
    dtype = dtype or (torch.float32 if kind == "float" else torch.int64)
    return x.to(device=device, dtype=dtype).contiguous()


def temperature(x: Any, m: int, device: torch.device, check_values: bool) -> torch.Tensor:
    """Returns the temperatures as fp32 ``[M, 1]`` on ``device``."""
    t = _row_vector("temperature", x, m, device, "float")
    if check_values and not _capturing(device):
        bad = ~(t >= 0) | torch.isinf(t)
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"temperature must be finite and >= 0 (0 means greedy), "
                f"got {t[row].item()} at row {row}"
            )
    return t.view(m, 1)


def seed(x: Any, m: int, device: torch.device) -> torch.Tensor:
    """Returns the seeds as int64 ``[M]`` on ``device`` (any integer dtype is accepted)."""
    return _row_vector("seed", x, m, device, "int")


def positions(x: Any, m: int, device: torch.device) -> torch.Tensor:
    """Returns the positions as int64 ``[M]`` on ``device``; None means zeros."""
    if x is None:
        return torch.zeros(m, dtype=torch.int64, device=device)
    return _row_vector("positions", x, m, device, "int")


def token_ids(x: Any, m: int, vocab: int, device: torch.device, check_values: bool) -> torch.Tensor:
    """Returns global token ids as int64 ``[M]`` on ``device``."""
    ids = _row_vector("token_ids", x, m, device, "int")
    if check_values and not _capturing(device):
        bad = (ids < 0) | (ids >= vocab)
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"token_ids must be in [0, {vocab}) (the global vocabulary), "
                f"got {ids[row].item()} at row {row}"
            )
    return ids


def _bad_row(bad: torch.Tensor, x: torch.Tensor, name: str, rule: str) -> None:
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{name} must be {rule}, got {x[row].item()} at row {row}")


def top_k(
    k: Any, m: int, vocab: int, device: torch.device, check_values: bool = True
) -> int | torch.Tensor | None:
    """None, an int in ``0..vocab`` (0: off), or int64 ``[M, 1]`` on ``device``."""
    if k is None:
        return None
    if isinstance(k, torch.Tensor):
        t = _row_vector("top_k", k, m, device, "int")
        if check_values and not _capturing(device):
            _bad_row(t < 0, t, "top_k", f"in 0..{vocab} (0 means off)")
        return t.view(m, 1)
    if not _is_int(k):
        raise TypeError(
            f"top_k must be None, an int or an integer tensor of length M={m}, "
            f"got {type(k).__name__} {k!r}"
        )
    if not 0 <= k <= vocab:
        raise ValueError(
            f"top_k must be in 0..{vocab} (0 means off; the global vocabulary), got {k}"
        )
    return k


def _probability(
    name: str,
    x: Any,
    m: int,
    device: torch.device,
    check_values: bool,
    low_open: bool,
    dtype: torch.dtype,
) -> float | torch.Tensor | None:
    rule = "in (0, 1]" if low_open else "in [0, 1]"
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        if dtype == torch.float64 and x.dtype == torch.float32:
            dtype = x.dtype  # kept: every use widens it to float64 on the device
        t = _row_vector(name, x, m, device, "float", dtype)
        if check_values and not _capturing(device):
            bad = ~((t > 0) if low_open else (t >= 0)) | ~(t <= 1)
            _bad_row(bad, t, name, rule)
        return t.view(m, 1)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(
            f"{name} must be None, a float or a floating tensor of length M={m}, "
            f"got {type(x).__name__} {x!r}"
        )
    if not ((0 < x) if low_open else (0 <= x)) or not x <= 1:
        raise ValueError(f"{name} must be {rule}, got {x}")
    return float(x)


def top_p(x: Any, m: int, device: torch.device, check_values: bool = True):
    """None, a float in (0, 1] (1: off), or float64 ``[M, 1]`` on ``device`` (a float32
    tensor stays float32: every use widens it to float64 exactly, on the device)."""
    return _probability("top_p", x, m, device, check_values, True, torch.float64)


def min_p(x: Any, m: int, device: torch.device, check_values: bool = True):
    """None, a float in [0, 1] (0: off), or fp32 ``[M, 1]`` on ``device``."""
    return _probability("min_p", x, m, device, check_values, False, torch.float32)


def top_n(n: Any, vocab: int) -> int:
    if not _is_int(n):
        raise TypeError(f"top_n must be an int, got {type(n).__name__} {n!r}")
    if not 0 <= n <= min(MAX_TOP_N, vocab):
        raise ValueError(f"top_n must be in 0..{min(MAX_TOP_N, vocab)}, got {n}")
    return n


def construction(columns: Any, capacity: Any, backend: Any) -> None:
    if not _is_int(columns) or columns < 1:
        raise ValueError(f"columns must be a positive int, got {columns!r}")
    if not _is_int(capacity) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    if backend not in ("auto", "symm_mem", "torch.distributed"):
        raise ValueError(
            f"backend must be 'auto', 'symm_mem' or 'torch.distributed', got {backend!r}"
        )
