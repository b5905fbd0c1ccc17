"""Tile configurations of the fused head kernel, per (M, H, columns), and the route choice.

:func:`pick` is a pure function of arguments every rank shares, so every rank launches
the same grid for the same call (``kernel.py``'s barrier needs that). ``None`` means
the route ``F.linear`` (cuBLAS) + the push gather, taken where the sweep found the
fused kernel slower than cuBLAS by more than 5 % at world size 1.

Sweep
-----
Measured with ``scripts/head-sweep.py`` on one H200 (bf16, world size 1, so the kernel
without peers or barrier; CUDA events around bursts of 10 calls, median of 5 bursts,
against the faster of two cuBLAS ``F.linear`` measurements of the same shape, taken
before and after the kernel's). Candidates: ``CANDIDATES`` in the script. Each row of
``TABLE`` below records the best candidate's time and its ratio to cuBLAS.

* **Meets (<= 1.05x cuBLAS) at M <= 16** for tp 2 and 4 at every H (0.97-1.03x), and
  for tp 8 at H=7168 (1.03x) and at H=5120, M=16 (1.03x). Here the GEMM streams the
  weight at 3.4-4.2 TB/s, as cuBLAS does (3.5-4.3 TB/s): it is memory-bound, and the
  fused kernel moves the same bytes.
* **Misses at M <= 16, tp 8, H=4096** (1.06-1.07x) **and H=5120, M <= 4** (1.05-1.06x),
  and **at M = 64** except tp 2, H=4096 (1.03x): 1.06x at tp 2, H 5120 and 7168,
  1.06-1.08x at tp 4, 1.25-1.27x at tp 8. Cause: wave quantisation. Profiled at tp 8
  (H=4096, columns=18944, M=1 and 64; ``scripts/head-profile.py --ncu``, metrics
  ``sm__cycles_active.{avg,max,min}``, ``launch__grid_size``, DRAM throughput) on an
  H100 SXM, which has the H200's 132 SMs (not swept: its own timings differ). A tile of
  64 columns gives 296 tiles for 132 persistent CTAs (40 take 3, 92 take 2) and one of
  128 gives 148 (16 take 2): the busiest SM is active 1.22-1.47x the average, and
  DRAM runs at 62-78 % of peak. cuBLAS at M=64 (``nvjet_sm90_tst_144x64``) cuts 144
  columns per CTA, 132 tiles for 132 SMs (max/average 1.11, DRAM 80 %, 58.0 us against
  our best 65.3 us). At M=1 cuBLAS (``nvjet_..._256x8``) runs 76 CTAs at 75 % of DRAM;
  our 16x256 tile (74 CTAs, 58 SMs idle) reached 81 % and 57.0 us against cuBLAS's
  62.9 us on that H100, so the route choice is per card. Predicted, not tried: column
  ranges of ``ceil(columns / SMs)`` per CTA (a masked 256-wide block) would balance
  every SM as cuBLAS's 144-column tile does.
* **Misses at M = 128 and 256 everywhere** (1.19-1.89x); the sweep's kernels stream
  1.4-2.9 TB/s of weight there. Profiled at M=256, H=5120, columns=75776 (tp 2) with
  ``scripts/head-profile.py`` under Nsight Compute (``--clock-control none``, one call
  of each kernel, world size 1): the shape is **compute-bound**, and the kernel keeps
  the tensor pipe busy for less of the time than cuBLAS does. cuBLAS
  (``nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT``: 3 warpgroups of 128 threads,
  clusters of 2, 221 KB of shared memory) took 262 us (757 TFLOP/s) with the tensor
  pipe active 94 % of its peak and DRAM at 65 %. The best candidate, 128x256x64 (8
  warps, 3 stages), took 333 us (1.27x) with the tensor pipe at 75 % and DRAM at 52 %;
  the default 128x128x64 tile took 454 us (47 %, 38 %); 128x128x64 with 4 warps 426 us
  (50 %), 64x128x64 566 us (37 %). Each runs one CTA of 4 or 8 warps per SM (the
  persistent grid is 132 CTAs; 128-220 registers per thread, 98-147 KB of shared
  memory), and its warps do not wait
  for the tensor core (the ``gmma`` stall is 0-0.08 cycles per issued instruction,
  cuBLAS's 3.4) but on fixed-latency dependencies (``wait``, 2.7-3.9) and, in the
  8-warp tiles, on global loads (long scoreboard, 1.1-1.5). Every kernel read the
  776 MB weight once from DRAM (789-806 MB), so L2 served the reuse across row
  blocks. The SM clock was not fixed: 1.53 GHz under cuBLAS, 1.67-1.78 GHz under the
  fused kernels. In the same run, CUDA events (median of 7 bursts of 20 calls) gave
  cuBLAS 273.4 us and the 128x256 tile 356.6 us (1.30x). For contrast, at M=16 (fused
  route) both are memory-bound: cuBLAS 177 us at 92 % of DRAM peak, the 16x128x128
  tile 185 us at 88 %. Predicted, not tried: feeding the tensor pipe at these M needs
  the loads issued apart from the wgmma warps (warp specialisation with TMA, which
  cuBLAS's 3-warpgroup, 2-CTA-cluster kernel suggests); until then these shapes take
  cuBLAS.

Every miss routes to ``F.linear`` + the push gather (``None``). Shapes that were not
swept take the nearest swept shape's rows (H first, then columns).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tile:
    """``BM x BN`` output tiles, ``BK`` deep K steps, ``warps`` per CTA, ``stages`` deep."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int

    def fit(self, hidden_size: int) -> Tile:
        """The same tile with ``bk`` lowered until it divides ``hidden_size`` (a multiple
        of 16), so the K loop needs no mask."""
        bk = self.bk
        while hidden_size % bk:
            bk //= 2
        return Tile(self.bm, self.bn, bk, self.warps, self.stages)

    def grid(self, m: int, columns: int, ctas: int) -> int:
        return min(ctas, -(-columns // self.bn) * -(-m // self.bm))


# (largest M, tile or None for cuBLAS) per swept (H, columns); a row applies to every M up
# to its bound (the last row to every larger M).
Row = tuple[int, "Tile | None"]
DEFAULT: tuple[Row, ...] = (
    (16, Tile(16, 64, 128, 4, 4)),
    (32, Tile(32, 64, 128, 4, 4)),
    (64, Tile(64, 64, 128, 4, 4)),
    (1 << 30, Tile(128, 128, 64, 8, 3)),
)
# Measured (scripts/head-sweep.py, one H200, bf16, world size 1): the best candidate tile
# and its time against cuBLAS F.linear; rows over 1.05x route to cuBLAS.
TABLE: dict[tuple[int, int], tuple[Row, ...]] = {
    (4096, 75776): (
        (1, Tile(16, 128, 128, 4, 4)),  # 153.5 vs cuBLAS 157.8 us: 0.972
        (4, Tile(16, 128, 128, 4, 4)),  # 154.5 vs cuBLAS 157.6 us: 0.980
        (16, Tile(16, 64, 256, 4, 3)),  # 158.1 vs cuBLAS 161.7 us: 0.978
        (64, Tile(64, 128, 128, 8, 3)),  # 162.5 vs cuBLAS 157.4 us: 1.032
        (128, None),  # 211.2 vs cuBLAS 166.4 us: 1.269
        (1 << 30, None),  # 277.8 vs cuBLAS 234.0 us: 1.187
    ),
    (4096, 37888): (
        (1, Tile(16, 64, 256, 4, 3)),  # 84.4 vs cuBLAS 84.8 us: 0.995
        (4, Tile(16, 64, 256, 4, 3)),  # 83.9 vs cuBLAS 84.8 us: 0.990
        (16, Tile(16, 64, 256, 4, 3)),  # 85.1 vs cuBLAS 86.0 us: 0.990
        (64, None),  # 92.3 vs cuBLAS 86.0 us: 1.073
        (128, None),  # 124.6 vs cuBLAS 84.8 us: 1.469
        (1 << 30, None),  # 177.9 vs cuBLAS 119.1 us: 1.495
    ),
    (4096, 18944): (
        (1, None),  # 47.6 vs cuBLAS 44.3 us: 1.073
        (4, None),  # 46.8 vs cuBLAS 44.3 us: 1.057
        (16, None),  # 47.0 vs cuBLAS 44.2 us: 1.064
        (64, None),  # 54.8 vs cuBLAS 43.3 us: 1.266
        (128, None),  # 76.3 vs cuBLAS 45.1 us: 1.691
        (1 << 30, None),  # 111.0 vs cuBLAS 58.8 us: 1.888
    ),
    (5120, 75776): (
        (1, Tile(16, 128, 128, 4, 4)),  # 187.6 vs cuBLAS 183.6 us: 1.022
        (4, Tile(16, 128, 128, 4, 4)),  # 185.8 vs cuBLAS 185.9 us: 1.000
        (16, Tile(16, 64, 256, 4, 3)),  # 192.7 vs cuBLAS 188.3 us: 1.023
        (64, None),  # 205.5 vs cuBLAS 194.3 us: 1.058
        (128, None),  # 283.7 vs cuBLAS 204.0 us: 1.391
        (1 << 30, None),  # 390.1 vs cuBLAS 292.4 us: 1.334
    ),
    (5120, 37888): (
        (1, Tile(16, 64, 256, 4, 3)),  # 105.6 vs cuBLAS 103.9 us: 1.016
        (4, Tile(16, 64, 256, 4, 3)),  # 102.9 vs cuBLAS 103.1 us: 0.998
        (16, Tile(16, 64, 256, 4, 3)),  # 104.0 vs cuBLAS 104.0 us: 1.001
        (64, None),  # 112.3 vs cuBLAS 104.0 us: 1.081
        (128, None),  # 152.2 vs cuBLAS 103.2 us: 1.474
        (1 << 30, None),  # 228.5 vs cuBLAS 148.0 us: 1.544
    ),
    (5120, 18944): (
        (1, None),  # 57.1 vs cuBLAS 54.0 us: 1.057
        (4, None),  # 56.8 vs cuBLAS 54.0 us: 1.051
        (16, Tile(16, 256, 64, 8, 4)),  # 56.6 vs cuBLAS 55.0 us: 1.028
        (64, None),  # 66.7 vs cuBLAS 52.4 us: 1.273
        (128, None),  # 94.4 vs cuBLAS 54.3 us: 1.736
        (1 << 30, None),  # 136.3 vs cuBLAS 73.4 us: 1.857
    ),
    (7168, 75776): (
        (1, Tile(16, 64, 256, 4, 3)),  # 258.1 vs cuBLAS 255.2 us: 1.012
        (4, Tile(16, 128, 128, 4, 4)),  # 258.0 vs cuBLAS 259.7 us: 0.993
        (16, Tile(16, 64, 256, 4, 3)),  # 261.9 vs cuBLAS 258.6 us: 1.013
        (64, None),  # 279.8 vs cuBLAS 265.0 us: 1.056
        (128, None),  # 397.0 vs cuBLAS 279.2 us: 1.422
        (1 << 30, None),  # 555.0 vs cuBLAS 408.7 us: 1.358
    ),
    (7168, 37888): (
        (1, Tile(16, 64, 128, 4, 6)),  # 145.8 vs cuBLAS 141.4 us: 1.031
        (4, Tile(16, 64, 256, 4, 3)),  # 139.4 vs cuBLAS 142.2 us: 0.980
        (16, Tile(16, 64, 256, 4, 3)),  # 140.3 vs cuBLAS 143.0 us: 0.982
        (64, None),  # 151.2 vs cuBLAS 143.0 us: 1.057
        (128, None),  # 231.9 vs cuBLAS 141.2 us: 1.642
        (1 << 30, None),  # 311.2 vs cuBLAS 205.6 us: 1.514
    ),
    (7168, 18944): (
        (1, Tile(16, 256, 64, 8, 4)),  # 79.1 vs cuBLAS 76.7 us: 1.031
        (4, Tile(16, 256, 64, 8, 4)),  # 79.2 vs cuBLAS 77.1 us: 1.027
        (16, Tile(16, 256, 64, 8, 4)),  # 79.5 vs cuBLAS 76.9 us: 1.033
        (64, None),  # 90.8 vs cuBLAS 72.6 us: 1.251
        (128, None),  # 130.1 vs cuBLAS 75.5 us: 1.723
        (1 << 30, None),  # 197.1 vs cuBLAS 105.2 us: 1.874
    ),
}


def _rows(hidden_size: int, columns: int) -> tuple[Row, ...]:
    """The swept shape nearest to (H, columns): H first, then columns (log distance)."""
    if not TABLE:
        return DEFAULT
    key = min(TABLE, key=lambda k: (abs(k[0] - hidden_size), abs(k[1] / columns - 1), k))
    return TABLE[key]


def _first(rows: tuple[Row, ...], m: int) -> Tile | None:
    return next((t for up_to, t in rows if m <= up_to), rows[-1][1])


def pick(m: int, hidden_size: int, columns: int, *, forced: bool = False) -> Tile | None:
    """The tile for ``m`` rows of this shape, fitted to ``hidden_size``; None: cuBLAS.
    ``forced``: never None (where the table says cuBLAS, the default tile for ``m``)."""
    tile = _first(_rows(hidden_size, columns), m)
    if tile is None and forced:
        tile = _first(DEFAULT, m)
    return None if tile is None else tile.fit(hidden_size)


def tiles(capacity: int, hidden_size: int, columns: int) -> list[Tile]:
    """Every distinct tile that calls of 1..capacity rows can pick, forced or not (compiled
    together)."""
    found: dict[Tile, None] = {}
    for m in range(1, capacity + 1):
        for forced in (False, True):
            t = pick(m, hidden_size, columns, forced=forced)
            if t is not None:
                found[t] = None
    return list(found)
