"""The fused GPU path: one Triton kernel, one exchange, one Triton kernel per operation.

Layout (int64 words per row and rank; the exchange carries them as fp32 pairs):
the shard is cut into ``S = ceil(N / BLOCK)`` splits of ``BLOCK`` columns and
program ``(row, split)`` of the local kernel writes its ``F`` words at
``split * F``:

==============  ====================================================  ==========
operation       words per split                                       ``F``
==============  ====================================================  ==========
greedy          key(x max, column)                                    1
sample          key(x max), key(best score g, column)                 2
sample top_k    key(x max), KP keys (s, column), KP keys (g, column)  1 + 2 KP
logprobs        (max, sum exp) as fp32 pair, NP keys (x, column)      1 + NP
==============  ====================================================  ==========

(logprobs has one more word in front of the splits: the token's logit, from the
rank that owns the token.) Keys are explained in :mod:`.kernels`. Nothing here
allocates but the outputs; no host sync.
"""

from __future__ import annotations

from typing import Any

import torch

BLOCK = 4096
WARPS = 8


def available(device: torch.device) -> bool:
    """Whether the fused kernels can run on ``device`` (CUDA with Triton importable)."""
    if device.type != "cuda":
        return False
    try:
        from . import kernels  # noqa: F401
    except Exception:  # noqa: BLE001 - no Triton (or a broken one): the torch-ops path
        return False
    return True


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


class Fused:
    """Launch geometry of one sampler (``columns`` per rank, ``world`` ranks)."""

    def __init__(self, columns: int, world: int, rank: int) -> None:
        from . import kernels

        self.k = kernels
        self.columns, self.world, self.col0 = columns, world, rank * columns
        self.block = max(min(BLOCK, _pow2(columns)), 64)
        self.splits = -(-columns // self.block)
        self.warps = WARPS if self.block >= 2048 else 4

    @staticmethod
    def room(k: int) -> int:
        """Candidate slots for ``k`` (power of two, >= 2)."""
        return max(2, _pow2(k))

    def width(self, op: str, room: int = 0) -> int:
        """Exchange width in fp32 words for ``op``."""
        f = {"greedy": 1, "sample": 2, "sample_k": 1 + 2 * room, "logprobs": 1 + room}[op]
        return 2 * (f * self.splits + (op == "logprobs"))

    def _shard(self, shard: torch.Tensor) -> torch.Tensor:
        return shard if shard.stride(1) == 1 else shard.contiguous()

    def greedy(self, shard: torch.Tensor, ex: Any) -> torch.Tensor:
        m = shard.shape[0]
        x = self._shard(shard)
        self.k.greedy_local[(m, self.splits)](
            x, x.stride(0), ex.payload, ex.width // 2, self.columns, self.col0,
            BLOCK=self.block, num_warps=self.warps)
        g = ex.send(m)
        out = torch.empty(m, dtype=torch.int64, device=shard.device)
        c = self.world * self.splits
        self.k.greedy_final[(m,)](g, out, self.world * ex.width // 2, c, CAND=max(2, _pow2(c)),
                                  num_warps=1)
        return out

    def sample(self, shard: torch.Tensor, t: torch.Tensor, seed: torch.Tensor, k: int | None,
               ex: Any) -> torch.Tensor:
        """``t`` fp32 ``[M]``, ``seed`` int64 ``[M]``; ``k`` None or 1..64 (fast top-k)."""
        m = shard.shape[0]
        x = self._shard(shard)
        kp = 0 if k is None else self.room(k)
        self.k.sample_local[(m, self.splits)](
            x, x.stride(0), t, seed, ex.payload, ex.width // 2, self.columns, self.col0,
            BLOCK=self.block, KP=kp, num_warps=self.warps)
        g = ex.send(m)
        out = torch.empty(m, dtype=torch.int64, device=shard.device)
        c = self.world * self.splits
        self.k.sample_final[(m,)](
            g, t, out, self.world * ex.width // 2, c, k or 0, CAND=max(2, _pow2(c)), KP=kp,
            KCAND=_pow2(c * kp) if kp else 1, num_warps=8 if kp else 1)
        return out

    def logprobs(self, shard: torch.Tensor, ids: torch.Tensor, n: int,
                 ex: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = shard.shape[0]
        x = self._shard(shard)
        npad = self.room(n) if n else 0
        self.k.logprobs_local[(m, self.splits)](
            x, x.stride(0), ids, ex.payload, ex.width // 2, self.columns, self.col0,
            BLOCK=self.block, NP=npad, num_warps=self.warps)
        g = ex.send(m)
        dev = shard.device
        lp = torch.empty(m, dtype=torch.float32, device=dev)
        top_ids = torch.empty(m, n, dtype=torch.int64, device=dev)
        top_lp = torch.empty(m, n, dtype=torch.float32, device=dev)
        c = self.world * self.splits
        self.k.logprobs_final[(m,)](
            g, ids, lp, top_ids, top_lp, self.world * ex.width // 2, ex.width // 2,
            self.splits, c, self.columns, self.world, n, CAND=max(2, _pow2(c)), NP=npad,
            NCAND=_pow2(c * npad) if npad else 1, num_warps=4 if npad else 1)
        return lp, top_ids, top_lp


__all__ = ["BLOCK", "Fused", "available"]
