"""Argument checks, local and before any collective, so ranks given the same bad input
raise the same exception, naming the argument and the value. Checks of tensor entries
cost a host sync; they are skipped during CUDA graph capture and with
``check_values=False``."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..checks import BACKENDS, DTYPES

MAX_TOP_N = 20


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def world(group: Any, what: str = "logits_gather.sampling") -> int:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{what} needs torch.distributed to be initialised "
            "(call torch.distributed.init_process_group first)"
        )
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(
            f"group must be a ProcessGroup or None, got {type(group).__name__} {group!r:.40}"
        )
    return dist.get_world_size(group)


def construction_problems(columns: Any, capacity: Any, backend: Any) -> list[str]:
    """What is wrong with a sampler's construction arguments (agreed before raising)."""
    problems = []
    for name, value in (("columns", columns), ("capacity", capacity)):
        if not _is_int(value) or value < 1:
            problems.append(f"{name} must be a positive int, got {value!r}")
    if backend not in BACKENDS:
        problems.append(f"backend must be one of {BACKENDS}, got {backend!r}")
    return problems


def shard(x: Any, *, columns=None, capacity=None, device=None) -> int:
    """``M``, once ``x`` is a valid shard (for a sampler of these, where given)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"shard must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"shard.dtype must be one of {', '.join(map(str, DTYPES))}, got {x.dtype}")
    if x.dim() != 2 or x.numel() == 0:
        raise ValueError(f"shard must be 2-D [M, N] with M, N >= 1, got shape {tuple(x.shape)}")
    m, n = x.shape
    if columns is not None and n != columns:
        raise ValueError(f"shard.shape[1] must equal the sampler's columns={columns}, got {n}")
    if capacity is not None and m > capacity:
        raise ValueError(
            f"shard.shape[0] (M) must be <= the sampler's capacity={capacity}, got {m}"
        )
    if device is not None and x.device != device:
        raise ValueError(f"shard.device must be {device}, got {x.device}")
    return m


def _rows(name: str, x: Any, m: int, device: torch.device, kind: str, dtype=None) -> torch.Tensor:
    """``x`` as a contiguous ``[M]`` tensor on ``device`` (the fused kernels read row ``i``
    at ``ptr + i``), fp32 or int64 by ``kind`` unless ``dtype`` says."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of length M={m}, got {type(x).__name__} {x!r:.40}"
        )
    floating = x.dtype.is_floating_point
    integral = not floating and not x.dtype.is_complex and x.dtype != torch.bool
    if not (floating if kind == "float" else integral):
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


def _values(t: torch.Tensor, is_bad, name: str, rule: str, check: bool) -> None:
    """Raises if ``is_bad(t)`` holds in some row. ``is_bad`` runs only when checking: its
    kernels cost about 7 us per call under graph replay at M=1 (measured on an H100)."""
    if not check or capturing(t.device):
        return
    bad = is_bad(t)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{name} must be {rule}, got {t[row].item()} at row {row}")


def temperature(x: Any, m: int, device: torch.device, check_values: bool) -> torch.Tensor:
    """fp32 ``[M, 1]``."""
    t = _rows("temperature", x, m, device, "float")
    rule = "finite and >= 0 (0 means greedy)"
    _values(t, lambda v: ~(v >= 0) | torch.isinf(v), "temperature", rule, check_values)
    return t.view(m, 1)


def seed(x: Any, m: int, device: torch.device) -> torch.Tensor:
    """int64 ``[M]``, from any integer dtype."""
    return _rows("seed", x, m, device, "int")


def positions(x: Any, m: int, device: torch.device) -> torch.Tensor:
    """int64 ``[M]``, or None (zeros)."""
    if x is None:
        return None
    if isinstance(x, (int, float)):  # sample(shard, t, seed, 50) meant top_k=50
        raise TypeError(
            f"positions must be a torch.Tensor of length M={m}, got {type(x).__name__} {x!r} "
            "(top_k, top_p and min_p are keyword-only)"
        )
    return _rows("positions", x, m, device, "int")


def token_ids(x: Any, m: int, vocab: int, device: torch.device, check_values: bool):
    """int64 ``[M]`` global ids."""
    ids = _rows("token_ids", x, m, device, "int")
    rule = f"in [0, {vocab}) (the global vocabulary)"
    _values(ids, lambda v: (v < 0) | (v >= vocab), "token_ids", rule, check_values)
    return ids


def _filter(name: str, x: Any, m: int, device, cv: bool, kind: str, ok, rule: str, dtype=None):
    """None, a scalar for which ``ok`` holds, or an ``[M, 1]`` tensor (entries checked)."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        t = _rows(name, x, m, device, kind, dtype)
        _values(t, lambda v: ~ok(v), name, rule, cv)
        return t.view(m, 1)
    if not (_is_int(x) or (kind == "float" and isinstance(x, float))):
        what = "an int or an integer" if kind == "int" else "a float or a floating"
        raise TypeError(
            f"{name} must be None, {what} tensor of length M={m}, got {type(x).__name__} {x!r}"
        )
    if not ok(x):
        raise ValueError(f"{name} must be {rule}, got {x}")
    return x if kind == "int" else float(x)


def top_k(k: Any, m: int, vocab: int, device: torch.device, cv: bool = True):
    """None, an int in ``0..vocab`` (0: off), or int64 ``[M, 1]`` (``>= vocab``: off)."""
    if isinstance(k, torch.Tensor):
        return _filter("top_k", k, m, device, cv, "int", lambda v: v >= 0, ">= 0 (0 means off)")
    rule = f"in 0..{vocab} (0 means off; the global vocabulary)"
    return _filter("top_k", k, m, device, cv, "int", lambda v: 0 <= v <= vocab, rule)


def _in(closed: bool):
    return lambda v: ((v >= 0) if closed else (v > 0)) & (v <= 1)


def top_p(x: Any, m: int, device: torch.device, cv: bool = True):
    """None, a float in (0, 1] (1: off), or float64 ``[M, 1]`` (float32 stays float32:
    every use widens it exactly, on the device)."""
    dtype = torch.float32 if getattr(x, "dtype", None) == torch.float32 else torch.float64
    return _filter("top_p", x, m, device, cv, "float", _in(False), "in (0, 1]", dtype)


def min_p(x: Any, m: int, device: torch.device, cv: bool = True):
    """None, a float in [0, 1] (0: off), or fp32 ``[M, 1]``."""
    return _filter("min_p", x, m, device, cv, "float", _in(True), "in [0, 1]")


def top_n(n: Any, vocab: int) -> int:
    if not _is_int(n):
        raise TypeError(f"top_n must be an int, got {type(n).__name__} {n!r}")
    if not 0 <= n <= min(MAX_TOP_N, vocab):
        raise ValueError(f"top_n must be in 0..{min(MAX_TOP_N, vocab)}, got {n}")
    return n


def sample_args(m: int, vocab: int, device, cv: bool, t, s, pos, k, p, mp) -> tuple:
    """``sample``'s arguments checked (``cv``: check values), in its order."""
    return (
        temperature(t, m, device, cv),
        seed(s, m, device),
        positions(pos, m, device),
        top_k(k, m, vocab, device, cv),
        top_p(p, m, device, cv),
        min_p(mp, m, device, cv),
    )
