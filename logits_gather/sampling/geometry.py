"""Launch plans of the fused kernels: how a row is cut into splits, and how many
warps each kernel runs (pure Python: the CPU tests hold its rules)."""

from __future__ import annotations

from typing import NamedTuple


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def room(k: int) -> int:
    """Candidate slots for ``k`` (power of two, >= 2)."""
    return max(2, _pow2(k))


def _warps(elements: int, most: int) -> int:
    """Warps for a kernel whose radix select runs over ``elements`` (a power of two): at
    most one thread per element. With more threads than elements Triton replicates each
    element across threads: with the top-k final kernel so replicated, emulated tp 4 and
    8 runs returned wrong top_k = 1 and 2 tokens on one rank (14 in 3868 top_k=2 calls at
    tp=4), and none without replication (benchmarks/NOTES.md)."""
    return max(1, min(most, elements // 32))


class Geometry(NamedTuple):
    """How one operation cuts a row: ``splits`` of ``block`` columns per rank, local
    kernels of ``warps`` warps, ``c`` splits over all ranks, ``cand`` = the waiting
    kernels' block over them (a power of two >= c)."""

    block: int
    splits: int
    warps: int
    c: int
    cand: int

    @classmethod
    def of(cls, columns: int, world: int, block: int, warps: int) -> Geometry:
        block = max(min(block, _pow2(columns)), 64)
        warps = _warps(block, warps if block >= 2048 else min(warps, 4))
        splits = -(-columns // block)
        return cls(block, splits, warps, world * splits, max(2, _pow2(world * splits)))

    def topk(self, k: int) -> TopK:
        """The fused top-k's launches for ``k`` (1..64) in this geometry."""
        g = min(64, max(8, _pow2(-(-k // self.c))))  # <= 64 <= block, and g * c >= k
        kp = room(k)
        probe = 8 if 2 * (1 + g) > 32 * self.warps else self.warps  # a lane per half-word
        return TopK(g, kp, probe, _warps(self.cand * g, 4), _warps(self.cand * kp, 8))


class TopK(NamedTuple):
    """Round 1 sends ``g`` group maxima per split (``probe`` warps), reduced by
    ``reduce`` warps; round 2 has ``kp`` candidate slots per split and a final kernel of
    ``final`` warps (never more threads than the candidates they select from)."""

    g: int
    kp: int
    probe: int
    reduce: int
    final: int


__all__ = ["Geometry", "TopK", "room"]
