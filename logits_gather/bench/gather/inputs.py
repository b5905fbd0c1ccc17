"""Inputs and the exact check: every rank builds every rank's shards from one seed."""

from __future__ import annotations

import torch

_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def random_shard(
    seed: int, rows: int, columns: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Uniform random bit patterns (NaN, inf and subnormals included): a gather is a
    copy and must keep every bit. Generated on the CPU so every rank agrees."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    bits = _BITS[dtype]
    info = torch.iinfo(bits)
    raw = torch.randint(info.min, info.max + 1, (rows, columns), dtype=bits, generator=gen)
    return raw.view(dtype).to(device)


class InputSets:
    """``sets`` independent inputs: ``shards[s][r]`` is rank ``r``'s ``[capacity, N]``
    shard of set ``s``. Calls rotate through the sets so that consecutive calls never
    read the data the previous call just pulled into the cache."""

    def __init__(
        self,
        *,
        seed: int,
        sets: int,
        world: int,
        capacity: int,
        columns: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.world, self.columns = world, columns
        self.shards = [
            [
                random_shard(seed * 1_000_003 + s * 1009 + r, capacity, columns, dtype, device)
                for r in range(world)
            ]
            for s in range(sets)
        ]

    def mine(self, rank: int) -> list[torch.Tensor]:
        return [per_rank[rank] for per_rank in self.shards]

    def expected(self, s: int, m: int) -> torch.Tensor:
        """What a gather of set ``s`` at ``m`` rows must return: ``torch.cat`` of all shards."""
        return torch.cat([shard[:m] for shard in self.shards[s]], dim=1)


def check(out: object, want: torch.Tensor) -> str | None:
    """None when ``out`` equals ``want`` bit for bit, else what differs."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if out.shape != want.shape or out.dtype != want.dtype:
        return f"returned {tuple(out.shape)} {out.dtype}, expected {tuple(want.shape)} {want.dtype}"
    bits = _BITS[want.dtype]
    diff = out.view(bits) != want.view(bits)
    if not bool(diff.any()):
        return None
    where = diff.nonzero()
    return f"{len(where)} of {want.numel()} elements differ, first at {where[:3].tolist()}"
