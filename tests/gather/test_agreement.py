"""Ranks that disagree about a gather call, on the gloo fallback: every rank raises the same
error, and none returns a result built from mismatched data (issue: no silent
disagreement between ranks)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks

COLUMNS = 1000


def _different_m(rank: int, world: int, check_calls: bool) -> list[str]:
    """Call 0 with M = 8 + rank; then the same M everywhere, which must still work."""
    gather = LogitsGather(COLUMNS, 16, device="cpu", dtype=torch.float32, check_calls=check_calls)
    torch.manual_seed(rank)
    seen = []
    try:
        gather(torch.randn(8 + rank, COLUMNS))
        seen.append("returned")
    except ValueError as exc:
        seen.append(str(exc))
    shard = torch.randn(4, COLUMNS)
    parts = [torch.empty_like(shard) for _ in range(world)]
    dist.all_gather(parts, shard)
    assert torch.equal(gather(shard), torch.cat(parts, dim=1))
    return seen


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("check_calls", [False, True])
def test_a_different_m_raises_the_same_error_everywhere(world: int, check_calls: bool) -> None:
    seen = run_ranks(_different_m, world, check_calls)
    first = seen[0][0]
    assert "M" in first and "differ" in first, first
    assert all(s == [first] for s in seen), seen


def _unchecked(rank: int, world: int) -> str:
    """:func:`_different_m` without the fallback's row exchange."""
    import logits_gather.fallback as fallback

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fallback.DistributedGather, "_same_rows", lambda self, m: None)
        gather = LogitsGather(COLUMNS, 16, device="cpu", dtype=torch.float32, timeout_s=10)
        out = gather(torch.randn(8 + rank, COLUMNS))
        return f"returned {tuple(out.shape)}"


def test_without_the_row_exchange_the_ranks_disagree() -> None:
    """The row exchange is what the test above relies on: without it a rank returns a
    result of its own M, or gloo aborts a rank (the run fails either way)."""
    try:
        seen = run_ranks(_unchecked, 2, timeout=60)
    except AssertionError as exc:  # a rank died or raised
        assert "rank" in str(exc)
    else:
        assert seen != [seen[0]] * 2, seen


def _after_destroy(rank: int, world: int) -> str:
    gather = LogitsGather(COLUMNS, 8, device="cpu", dtype=torch.float32)
    gather(torch.randn(2, COLUMNS))
    dist.destroy_process_group()
    try:
        gather(torch.randn(2, COLUMNS))
    except RuntimeError as exc:
        return str(exc)
    finally:
        del gather
    return "no error"


def test_a_call_after_destroy_names_the_object() -> None:
    for message in run_ranks(_after_destroy, 2):
        assert message.startswith("LogitsGather(columns=1000"), message
        assert "destroy_process_group" in message, message
