"""Launch plans of the fused kernels: how a row is cut into splits, and how many
warps each kernel runs (pure Python: the CPU tests hold its rules)."""

from __future__ import annotations

from typing import NamedTuple

import torch

NUCLEUS_LANES = 4096
"""Top-p candidates over all splits of a row, at most (:mod:`.nucleus`)."""
WIDE = (4096, 8)
"""(columns per split, warps) of greedy, plain logprobs and top-k."""
NARROW = (2048, 4)
"""(columns per split, warps) of sampling, min-p, the scores and logprobs with top_n."""
FINAL_WARPS = 8
"""Warps of top-p's final kernels (4096 candidate lanes at tp=2); no fused kernel runs
more than 8 (``tests/test_sampling_cpu.py``). At 16, nucleus_final's optimised machine
code is wrong: on the same mailbox words, float16 and float32 rows with no valid
candidate took the decided branch (token 2**32 - 1) or computed a round-2 level, where
8 warps (also when capped at 128 registers with ``maxnreg``) and 4 warps said
"undecided". The same PTX through ``ptxas --opt-level 0`` gave the right rows, levels 1
to 3 the wrong ones, and a copy that stored its intermediate values was right: a ptxas
fault, or undefined behaviour in the PTX that only its optimiser exploits (not found).
16 warps were also no faster (15.4 against 14.9 us at M=64 on one H200)."""


def xbits(dtype: torch.dtype) -> int:
    """Bits of the radix keys of x (:func:`.keys.radix_bits`) that the overflow writer
    and the final kernels (:func:`.masses.decode_keys`) use: 16 for bfloat16 inputs (their
    values fill the top 16 of fp32's), else 32."""
    return 16 if dtype == torch.bfloat16 else 32


def pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def room(k: int) -> int:
    """Candidate slots for ``k`` (power of two, >= 2)."""
    return max(2, pow2(k))


IDLE_PROGRAMS = 256
"""Programs of a launch that rarely has work (:func:`idle_programs`): on one H200,
top-k's overflow writer took 4.9 us at M=64 on one program per split (1216) and 1.1 us
at M=1 (19); top-p's round-2 writer 4.0 and 0.9."""
IDLE_LEAST = 8
"""Programs per row of such a launch, at least. With one at M=256, a run where 3 rows
reached top-p's round 2 (each then serving its 37 splits in series) took 242.5 us for
top_p=0.9; with 8, a run where 2 did took 196.6, one where none did 170.3 (one H200).
These two serve top-p's round 2, which the sampler's top-p calls skip when no row needs
it (:mod:`.fallback`); top-k's overflow writer runs on every call, so it uses the next two."""
OVERFLOW_PROGRAMS = 128
""":data:`IDLE_PROGRAMS` of top-k's overflow writer: one wave of 8-warp programs at M=64
(its 229 registers fit one per SM). With (256, 8), 64 rows of top_k=50 took 43.8 us, with
(128, 2) 41.5; at M=256 115.7 and 108.3 (one H200)."""
OVERFLOW_LEAST = 2
""":data:`IDLE_LEAST` of top-k's overflow writer: a row all of whose 19 splits overflow
(ties) is served in 10 turns."""


def idle_programs(m: int, splits: int, total: int | None = None, least: int | None = None) -> int:
    """Programs per row of a writer that usually has nothing to do (top-k's overflow,
    top-p's round 2), each serving its share of the row's ``splits`` in turn: about
    ``total`` (:data:`IDLE_PROGRAMS`) in all, but never fewer than ``least``
    (:data:`IDLE_LEAST`) per row (all ``splits`` if fewer), so a row that does need the
    writer waits for at most ``ceil(splits / least)`` splits in series."""
    total = IDLE_PROGRAMS if total is None else total
    least = IDLE_LEAST if least is None else least
    return min(splits, max(least, total // max(m, 1)))


def select_warps(elements: int, most: int) -> int:
    """Warps for a kernel whose radix select runs over ``elements`` (a power of two): at
    most one thread per element. With more threads than elements Triton replicates each
    element across threads: with the top-k final kernel so replicated, emulated tp 4 and
    8 runs returned wrong top_k = 1 and 2 tokens on one rank (14 in 3868 top_k=2 calls at
    tp=4), and none without replication. Those candidates are
    polled words: the likely cause is the warp-local poll exit of :mod:`.ll`'s "Uniform
    polls", which its waits now avoid; the rule stays until a GPU run of the emulated
    tp 4 and 8 top-k test without it shows that suffices."""
    return max(1, min(most, elements // 32))


def one_warps(writer: int, elements: int, least: int = 1) -> int:
    """Warps of a one-launch kernel (:mod:`.single`) whose writer runs ``writer``
    warps and needs at least ``least``, and whose row work selects over ``elements``:
    never more threads than elements (:func:`select_warps`); 0 when no count suits both."""
    warps = min(writer, max(1, elements // 32))
    return warps if warps >= least else 0


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
        block = max(min(block, pow2(columns)), 64)
        warps = select_warps(block, warps if block >= 2048 else min(warps, 4))
        splits = -(-columns // block)
        return cls(block, splits, warps, world * splits, max(2, pow2(world * splits)))

    def topk(self, k: int) -> TopK:
        """The fused top-k's launches for ``k`` (1..64) in this geometry."""
        g = min(64, max(8, pow2(-(-k // self.c))))  # <= 64 <= block, and g * c >= k
        kp = room(k)
        least = -(-2 * (1 + g) // 32)  # the probe's lanes: one per half-word
        probe = 8 if least > self.warps else self.warps
        reduce, final = select_warps(self.cand * g, 4), select_warps(self.cand * kp, 8)
        probe_one = one_warps(probe, self.cand * g, least)
        return TopK(g, kp, probe, reduce, final, probe_one, one_warps(self.warps, self.cand * kp))


class TopK(NamedTuple):
    """Round 1 sends ``g`` group maxima per split (``probe`` warps), reduced by
    ``reduce`` warps; round 2 has ``kp`` candidate slots per split and a final kernel of
    ``final`` warps (never more threads than the candidates they select from).
    ``probe_one`` and ``final_one``: warps of each round as one launch (the probe with
    the reduce, the overflow writer with the final; :mod:`.single`), 0 where
    the round takes two."""

    g: int
    kp: int
    probe: int
    reduce: int
    final: int
    probe_one: int
    final_one: int


__all__ = [
    "FINAL_WARPS",
    "NARROW",
    "NUCLEUS_LANES",
    "WIDE",
    "pow2",
    "select_warps",
    "xbits",
    "IDLE_LEAST",
    "IDLE_PROGRAMS",
    "OVERFLOW_LEAST",
    "OVERFLOW_PROGRAMS",
    "Geometry",
    "TopK",
    "idle_programs",
    "one_warps",
    "room",
]
