"""Test data: fresh random bit patterns (NaN, inf and subnormals included), the
same on every rank for a given seed, and exact bitwise comparison."""

from __future__ import annotations

import torch

_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def random_bits(
    seed: int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Every bit pattern of ``dtype`` is equally likely; a gather is a copy and
    must preserve all of them."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    bits = _BITS[dtype]
    info = torch.iinfo(bits)
    raw = torch.randint(info.min, info.max + 1, shape, dtype=bits, generator=gen)
    return raw.view(dtype).to(device)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.contiguous().view(_BITS[a.dtype]), b.contiguous().view(_BITS[b.dtype]))
    )


def mismatch(a: torch.Tensor, b: torch.Tensor) -> str:
    """A short description of where two same-shaped tensors differ."""
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    diff = (a.contiguous().view(_BITS[a.dtype]) != b.contiguous().view(_BITS[b.dtype])).nonzero()
    return f"{len(diff)} elements differ, first at {diff[:4].tolist()}"
