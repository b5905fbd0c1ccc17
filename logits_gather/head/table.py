"""Tile configurations of the fused head kernel, per (M, H, columns), and the route choice.

:func:`pick` is a pure function of arguments every rank shares, so every rank launches
the same grid for the same call (``kernel.py``'s barrier needs that). ``None`` means
the route ``F.linear`` (cuBLAS) + the push gather, taken where the sweep found the
fused kernel slower than cuBLAS by more than 5 % at world size 1.

Sweep
-----
PLACEHOLDER: replaced by the measured outcome of ``scripts/head-sweep.py``.
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
TABLE: dict[tuple[int, int], tuple[Row, ...]] = {}


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
