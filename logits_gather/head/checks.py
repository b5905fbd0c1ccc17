"""``LogitsGather.linear``'s argument checks, and why a call cannot take the fused kernel.

:func:`linear_error` judges one call's own arguments (this rank's): the exception to
raise, or None. :func:`unfusable` judges what every rank shares (the object, ``M``, the
hidden size): why the fused kernel cannot serve such calls, or None. Only shared facts
decide the route, so every rank takes the same one; a rank whose tensors are merely
misaligned or strided copies them instead (:func:`aligned`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..logs import log_once

log = logging.getLogger("logits_gather.head")

KERNEL_DTYPES = (torch.bfloat16, torch.float16)
ALIGN = 16  # bytes: the kernel's vector loads and stores


def linear_error(
    hidden: Any,
    weight: Any,
    fused: Any,
    *,
    columns: int,
    capacity: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Exception | None:
    """The exception for a bad ``linear(hidden, weight, fused=...)`` call, or None."""
    if fused is not None and not isinstance(fused, bool):
        return TypeError(f"fused must be None, True or False, got {fused!r}")
    for name, t in (("hidden", hidden), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            return TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            return TypeError(f"{name}.dtype must be {dtype} (as constructed), got {t.dtype}")
        if t.dim() != 2:
            return ValueError(
                f"{name} must be 2-D, got {t.dim()}-D shape {tuple(t.shape)} "
                "(hidden [M, H], weight [columns, H])"
            )
        if t.device != device:
            return ValueError(
                f"{name}.device must be {device} (this object's device), got {t.device}"
            )
    m, h = hidden.shape
    if not 1 <= m <= capacity:
        return ValueError(f"hidden.shape[0] (M) must be in 1..{capacity} (capacity), got {m}")
    if h < 1:
        return ValueError(f"hidden.shape[1] (H) must be positive, got {h}")
    if weight.shape[0] != columns:
        return ValueError(
            f"weight.shape[0] must equal columns={columns} (this rank's [columns, H] slice "
            f"of the LM head), got {weight.shape[0]} (weight shape {tuple(weight.shape)})"
        )
    if weight.shape[1] != h:
        return ValueError(
            f"weight.shape[1] must equal hidden.shape[1]={h}, got {weight.shape[1]} "
            f"(weight shape {tuple(weight.shape)})"
        )
    return None


def unfusable(*, hidden_size: int, columns: int, dtype: torch.dtype, kernel: str | None) -> str:
    """Why calls with this hidden size cannot take the fused kernel ('' if they can).
    ``kernel`` is why this object has no kernel at all (None if it has one)."""
    if kernel is not None:
        return kernel
    if dtype not in KERNEL_DTYPES:
        return f"the fused kernel takes bfloat16 and float16, not {dtype}"
    if hidden_size % 16:
        return f"the fused kernel needs H a multiple of 16, got H={hidden_size}"
    if columns % 16:
        return f"the fused kernel needs columns a multiple of 16, got columns={columns}"
    return ""


def aligned(t: torch.Tensor, name: str) -> torch.Tensor:
    """``t`` itself if contiguous and 16-byte aligned, else a copy that is (logged once)."""
    if t.is_contiguous() and t.data_ptr() % ALIGN == 0:
        return t
    log_once(
        log,
        f"LogitsGather.linear: {name} is not contiguous and 16-byte aligned, so it is "
        "copied on every such call (pass contiguous, aligned tensors to avoid the copy)",
        logging.WARNING,
    )
    copy = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return copy.copy_(t)
