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

import logging
import os
from typing import Any

import torch

log = logging.getLogger(__name__)

BLOCK = 4096
WARPS = 8
JIT_ENV = "LOGITS_GATHER_SAMPLING_JIT"
"""Set to 1 to launch through Triton's JIT dispatch every time (no cached kernels)."""


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


def _spec(a: Any) -> Any:
    """What Triton specialises an argument on: dtype and 16-byte alignment for tensors,
    ``== 1``, ``% 16 == 0`` and width for ints."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    return a == 1, a % 16 == 0, a.bit_length() > 31


class _Launcher:
    """Launches a Triton kernel, skipping the JIT dispatch (10-20 us of host time) after
    the first call of each specialisation: the compiled kernel is cached under the same
    specialisation key Triton uses, then called through its launcher. Any failure of
    the cached route falls back to the JIT for good (logged once)."""

    def __init__(self) -> None:
        self._cache: dict[tuple, Any] = {}
        self._jit_only = os.environ.get(JIT_ENV) == "1"

    def __call__(
        self, fn: Any, grid: tuple[int, int], args: tuple, consts: dict[str, int], warps: int
    ) -> None:
        key = (fn, grid[1], warps, tuple(consts.values()), *map(_spec, args))
        ck = None if self._jit_only else self._cache.get(key)
        if ck is not None:
            try:
                from triton.runtime import driver

                stream = driver.active.get_current_stream(torch.cuda.current_device())
                ck.run(
                    grid[0],
                    grid[1],
                    1,
                    stream,
                    ck.function,
                    ck.packed_metadata,
                    None,
                    None,
                    None,
                    *args,
                    *consts.values(),
                )
                return
            except Exception:  # noqa: BLE001 - the JIT route below still works
                log.warning(
                    "logits_gather.sampling: cached Triton launch failed; using "
                    "Triton's JIT dispatch from now on",
                    exc_info=True,
                )
                self._jit_only = True
        ck = fn[grid](*args, **consts, num_warps=warps)
        if not self._jit_only and ck is not None and hasattr(ck, "run"):
            self._cache[key] = ck


class Fused:
    """Launch geometry of one sampler (``columns`` per rank, ``world`` ranks)."""

    def __init__(self, columns: int, world: int, rank: int) -> None:
        from . import kernels

        self.k = kernels
        self.columns, self.world, self.col0 = columns, world, rank * columns
        self.block = max(min(BLOCK, _pow2(columns)), 64)
        self.splits = -(-columns // self.block)
        self.warps = WARPS if self.block >= 2048 else 4
        self.launch = _Launcher()

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
        self.launch(
            self.k.greedy_local,
            (m, self.splits),
            (x, x.stride(0), ex.payload, ex.width // 2, self.columns, self.col0),
            {"BLOCK": self.block},
            self.warps,
        )
        g = ex.send(m)
        out = torch.empty(m, dtype=torch.int64, device=shard.device)
        c = self.world * self.splits
        self.launch(
            self.k.greedy_final,
            (m, 1),
            (g, out, self.world * ex.width // 2, c),
            {"CAND": max(2, _pow2(c))},
            1,
        )
        return out

    def sample(
        self, shard: torch.Tensor, t: torch.Tensor, seed: torch.Tensor, k: int | None, ex: Any
    ) -> torch.Tensor:
        """``t`` fp32 ``[M]``, ``seed`` int64 ``[M]``; ``k`` None or 1..64 (fast top-k)."""
        m = shard.shape[0]
        x = self._shard(shard)
        kp = 0 if k is None else self.room(k)
        self.launch(
            self.k.sample_local,
            (m, self.splits),
            (x, x.stride(0), t, seed, ex.payload, ex.width // 2, self.columns, self.col0),
            {"BLOCK": self.block, "KP": kp},
            self.warps,
        )
        g = ex.send(m)
        out = torch.empty(m, dtype=torch.int64, device=shard.device)
        c = self.world * self.splits
        self.launch(
            self.k.sample_final,
            (m, 1),
            (g, t, out, self.world * ex.width // 2, c, k or 0),
            {"CAND": max(2, _pow2(c)), "KP": kp, "KCAND": _pow2(c * kp) if kp else 1},
            8 if kp else 1,
        )
        return out

    def scores(
        self, shard: torch.Tensor, t: torch.Tensor, seed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(s, g)`` fp32 ``[M, N]`` for the filter path, in one kernel (bit-identical to
        :func:`.rng.perturbed`)."""
        m = shard.shape[0]
        x = self._shard(shard)
        s = torch.empty(m, self.columns, dtype=torch.float32, device=shard.device)
        g = torch.empty_like(s)
        self.launch(
            self.k.scores_kernel,
            (m, self.splits),
            (x, x.stride(0), t, seed, s, g, self.columns, self.col0),
            {"BLOCK": self.block},
            self.warps,
        )
        return s, g

    def sample_minp(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: torch.Tensor,
        log_min_p: torch.Tensor,
        ex_greedy: Any,
        ex: Any,
    ) -> torch.Tensor:
        """min-p without top-k/top-p: greedy kernel, exchange, min-p kernel (``s_max`` from
        the gathered greedy keys), exchange, final kernel. ``log_min_p`` fp32 ``[M]``."""
        m = shard.shape[0]
        x = self._shard(shard)
        self.launch(
            self.k.greedy_local,
            (m, self.splits),
            (x, x.stride(0), ex_greedy.payload, ex_greedy.width // 2, self.columns, self.col0),
            {"BLOCK": self.block},
            self.warps,
        )
        gx = ex_greedy.send(m)
        c = self.world * self.splits
        self.launch(
            self.k.minp_local,
            (m, self.splits),
            (
                x,
                x.stride(0),
                t,
                seed,
                log_min_p,
                gx,
                self.world * ex_greedy.width // 2,
                c,
                ex.payload,
                ex.width // 2,
                self.columns,
                self.col0,
            ),
            {"BLOCK": self.block, "CAND": max(2, _pow2(c))},
            self.warps,
        )
        g = ex.send(m)
        out = torch.empty(m, dtype=torch.int64, device=shard.device)
        self.launch(
            self.k.sample_final,
            (m, 1),
            (g, t, out, self.world * ex.width // 2, c, 0),
            {"CAND": max(2, _pow2(c)), "KP": 0, "KCAND": 1},
            1,
        )
        return out

    def logprobs(
        self, shard: torch.Tensor, ids: torch.Tensor, n: int, ex: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = shard.shape[0]
        x = self._shard(shard)
        npad = self.room(n) if n else 0
        self.launch(
            self.k.logprobs_local,
            (m, self.splits),
            (x, x.stride(0), ids, ex.payload, ex.width // 2, self.columns, self.col0),
            {"BLOCK": self.block, "NP": npad},
            self.warps,
        )
        g = ex.send(m)
        dev = shard.device
        lp = torch.empty(m, dtype=torch.float32, device=dev)
        top_ids = torch.empty(m, n, dtype=torch.int64, device=dev)
        top_lp = torch.empty(m, n, dtype=torch.float32, device=dev)
        c = self.world * self.splits
        self.launch(
            self.k.logprobs_final,
            (m, 1),
            (
                g,
                ids,
                lp,
                top_ids,
                top_lp,
                self.world * ex.width // 2,
                ex.width // 2,
                self.splits,
                c,
                self.columns,
                self.world,
                n,
            ),
            {"CAND": max(2, _pow2(c)), "NP": npad, "NCAND": _pow2(c * npad) if npad else 1},
            4 if npad else 1,
        )
        return lp, top_ids, top_lp


__all__ = ["BLOCK", "Fused", "available"]
