"""The team rule of top-p's in-kernel fallback (plans.rest_team, rest_teams): pure Python."""

from __future__ import annotations

import pytest

from logits_gather.sampling.fused.plans import REST, rest_team, rest_teams

CHUNK = 4 * REST[2]  # a member's scan: four steps in flight
COLUMNS = [151552, 75776, 50518, 37888, 18944, 4096, 2048, 1000]
MOST = [128, 132, 64, 16, 1]


def _busy(columns: int, parts: int) -> int:
    """Members that get columns: the kernel gives each ceil(ceil(N / parts) / chunk) chunks."""
    each = -(-columns // parts)
    span = -(-each // CHUNK) * CHUNK
    return -(-columns // span)


@pytest.mark.parametrize("columns", COLUMNS)
@pytest.mark.parametrize("most", MOST)
def test_grid_stays_resident_and_every_member_has_columns(columns: int, most: int) -> None:
    for m in [*range(1, 40), 64, 100, 256, 1000]:
        slots, parts = rest_team(columns, m, most)
        assert 1 <= slots <= m and parts >= 1
        assert slots * parts <= most, (columns, m, most, slots, parts)
        assert _busy(columns, parts) == parts, (columns, m, most, parts)


@pytest.mark.parametrize("columns", COLUMNS)
def test_full_grids_keep_the_old_teams(columns: int) -> None:
    """Where the rows fill the grid: the members that had columns under the old rule (at
    most 16 of 8192 columns or more)."""
    old = max(1, min(16, columns // 8192, 128))
    assert rest_team(columns, 1000, 128)[1] == _busy(columns, old)


@pytest.mark.parametrize("columns", COLUMNS)
def test_teams_widen_as_m_falls_and_fill_the_grid(columns: int) -> None:
    chunks = -(-columns // CHUNK)
    last = None
    for m in range(1, 129):
        slots, parts = rest_team(columns, m, 128)
        if last is not None:
            assert parts <= last  # never narrower for fewer rows
        last = parts
        # Idle programs only where the columns run out or the old teams already fill it.
        assert (
            slots * parts >= min(m * chunks, 128) // 2 or parts == rest_team(columns, 1000, 128)[1]
        )
    assert rest_team(columns, 1, 128)[1] == min(chunks, 128)


@pytest.mark.parametrize("columns", COLUMNS)
@pytest.mark.parametrize("most", MOST)
def test_wider_teams_and_their_rows(columns: int, most: int) -> None:
    rows, teams = rest_teams(columns, most)
    full = rest_team(columns, 10**6, most)[1]
    for m in range(1, most + 3):
        parts = rest_team(columns, m, most)[1]
        if parts == full:
            continue
        assert parts in teams and m <= teams[parts] <= rows  # its mailbox has room for m
    assert full not in teams
