"""Launch plans of the fused kernels: how a row is cut into splits and how many warps and
programs each kernel runs. Pure Python; the CPU tests hold its rules."""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

TOPP_LANES = 4096
"""Top-p candidates over all splits of a row, at most."""
WIDE = (4096, 8)
"""(columns per split, warps) of greedy, plain logprobs and top-k. Greedy's other splits
were no faster (one H100, world size 1, V=151552, bf16, graph replay, µs at M = 1 / 16 /
64 / 256): 4096 x 8 took 3.5 / 5.1 / 11.1 / 37.8; 2048 x 4 4.6 / 6.0 / 11.3 / 37.4;
8192 x 8 4.2 / 6.3 / 13.2 / 55.3; 16384 x 8 5.2 / 8.2 / 16.7 / 74.3. At M=256 greedy
streams about 2 TB/s whatever the split.

Greedy's writer at M = 1 / 16 / 64 / 256 (one H100, world size 1, bf16, graph replay, µs
of the writer alone, one run; ``torch.amax(x, 1)`` took 7.5 / 9.6 / 14.8 / 41.8): as
built, 2.1 / 3.7 / 9.2 / 35.8; its epoch loaded before the split (kept; timed with masked
loads) 2.1 / 3.9 / 9.1 / 33.8; 4 warps 2.5 / 3.8 / 9.3 / 42.5; 16 warps 2.2 / 4.3 / 11.3 /
43.4; two splits per program, both loads issued first, 2.7 / 4.5 / 10.0 / 36.0; four, 4.3
/ 5.9 / 11.4 / 38.6; ``evict_first`` loads 2.2 / 3.7 / 9.0 / 34.0. So at M=256 the writer
reads 77.6 MB at 2.2 to 2.3 TB/s, faster than torch's own row max. Those writers ran
key16 (``keys.best_key16``); bfloat16 rows that :func:`pairs` accepts take
``keys.best_key_pairs``, 27.1 us at M=256 on the same GPU (its docstring)."""
NARROW = (2048, 4)
"""(columns per split, warps) of sampling, min-p, top-p and logprobs with top_n."""
FINAL_WARPS = 8
"""Warps of top-p's final kernels; no fused kernel runs more (``tests/sampling/test_sampling.py``).
Measured at 16 warps: nucleus_final's machine code gives wrong answers (float16 and
float32 rows with no valid candidate take the decided branch or a round-2 level where 8
and 4 warps say "undecided"; the same PTX is right through ``ptxas --opt-level 0`` and
wrong at levels 1-3), and it is no faster (15.4 against 14.9 us at M=64, one H200); so 8."""


REST = (8192, 16, 512, 8)
"""Top-p's in-kernel fallback (:mod:`..kernels.topp_exact`): (columns per team member at least
and members per rank at most where the rows fill the grid, columns per scan step, warps)."""
REST_PROGRAMS = 128
"""Programs of that fallback's grid per rank, at most (row slots x members): its teams
spin on each other, so the grid must stay resident beside the other ranks' kernels."""


def rest_team(columns: int, rows: int, most: int) -> tuple[int, int]:
    """``(row slots, members per rank)`` of the fallback's grid for ``rows`` rows and at most
    ``most`` programs. Each member scans whole chunks of four scan steps (2048 columns).
    Where the rows fill the grid, :data:`REST`'s teams; where they leave it idle (small M),
    wider teams, up to one chunk per member, so every program has columns: a pass over a
    row then costs one chunk's scan and the exchange's latency, not 19 chunks'."""
    chunk = 4 * REST[2]
    chunks = -(-columns // chunk)
    full = max(1, min(REST[1], columns // REST[0], most))
    want = max(full, min(chunks, most // max(rows, 1)))
    per = -(-chunks // want)  # chunks per member; members with columns only
    parts = max(1, min(most, -(-chunks // per)))
    return max(1, min(rows, most // parts)), parts


@functools.lru_cache(maxsize=64)
def rest_teams(columns: int, most: int) -> tuple[int, dict[int, int]]:
    """``(rows, {members: largest M})`` of :func:`rest_team`'s wider teams: the largest M
    that takes a team wider than a full grid's, and each wider team's largest M (the
    rows its mailbox needs). Cached: read, never change, the dict it returns."""
    full = rest_team(columns, most + 1, most)[1]
    teams: dict[int, int] = {}
    for m in range(1, most + 1):
        parts = rest_team(columns, m, most)[1]
        if parts != full:
            teams[parts] = m
    return max(teams.values(), default=0), teams


def xbits(dtype: torch.dtype) -> int:
    """Bits of x's radix keys in the kernels (:func:`..kernels.keys.radix_bits`): 16 for
    bfloat16 inputs (their values fill fp32's top 16), else 32."""
    return 16 if dtype == torch.bfloat16 else 32


def dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` with unit column stride, as every writer reads it (copied only if needed).
    The sampler takes it once per call, before :class:`.fused.Fused`, whose rounds read
    it as it is; :func:`pairs` judges the tensor the writers read."""
    return x if x.stride(1) == 1 else x.contiguous()


def pairs(x: torch.Tensor) -> bool:
    """Whether greedy's writers read ``x`` (columns contiguous) as bfloat16 pairs
    (:func:`..kernels.keys.best_key_pairs`): bfloat16 rows that all start 4-byte aligned."""
    return x.dtype == torch.bfloat16 and x.data_ptr() % 4 == 0 and x.stride(0) % 2 == 0


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
These serve top-p's round 2, skipped when no row needs it; top-k's overflow writer runs
on every call and uses the next two."""
OVERFLOW_PROGRAMS = 128
""":data:`IDLE_PROGRAMS` of top-k's overflow writer: one wave of 8-warp programs at M=64
(its 229 registers fit one per SM). With (256, 8), 64 rows of top_k=50 took 43.8 us, with
(128, 2) 41.5; at M=256 115.7 and 108.3 (one H200)."""
OVERFLOW_LEAST = 2
""":data:`IDLE_LEAST` of top-k's overflow writer: a row all of whose 19 splits overflow
(ties) is served in 10 turns."""


def idle_programs(m: int, splits: int, total: int | None = None, least: int | None = None) -> int:
    """Programs per row of a writer that usually has nothing to do, each serving its share
    of the row's ``splits`` in turn: about ``total`` in all, at least ``least`` per row
    (all ``splits`` if fewer)."""
    total = IDLE_PROGRAMS if total is None else total
    least = IDLE_LEAST if least is None else least
    return min(splits, max(least, total // max(m, 1)))


def select_warps(elements: int, most: int) -> int:
    """Warps for a kernel whose radix select runs over ``elements``: at most one thread per
    element. Measured with the top-k final kernel replicated across threads: emulated tp 4
    and 8 return wrong top_k = 1 and 2 tokens on one rank (14 in 3868 calls at tp=4),
    likely through the warp-local poll exit (:mod:`..kernels.exchange`, "Uniform polls")
    that the waits avoid; no GPU run without this rule has been measured, so it holds."""
    return max(1, min(most, elements // 32))


def one_warps(writer: int, elements: int, least: int = 1) -> int:
    """Warps of a one-launch kernel whose writer runs ``writer`` warps (at least ``least``)
    and whose row work selects over ``elements`` (:func:`select_warps`); 0: none suits."""
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
    """Round 1: ``g`` group maxima per split (``probe`` warps), reduced by ``reduce`` warps;
    round 2: ``kp`` candidate slots per split, a final kernel of ``final`` warps.
    ``probe_one``, ``final_one``: each round's warps as one launch (0: two launches)."""

    g: int
    kp: int
    probe: int
    reduce: int
    final: int
    probe_one: int
    final_one: int
