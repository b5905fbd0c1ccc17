"""Ranks that disagree about a sampling call (2 and 3 gloo ranks): every rank raises the
same error, and no rank returns tokens built from mismatched calls. Each check is shown
to matter: with it switched off, the same disagreement goes through."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from logits_gather import sampling
from scripts.support.dist import run_ranks

WORLDS = [2, 3]
CHECKED = {"LOGITS_GATHER_CHECK_CALLS": "1"}


def _error(fn, *args, **kwargs) -> str:
    """``fn``'s error as 'Type: message', or 'returned ...'."""
    try:
        out = fn(*args, **kwargs)
    except (TypeError, ValueError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"returned {out.tolist() if isinstance(out, torch.Tensor) else out}"


def _rows(m: int, n: int, rank: int) -> torch.Tensor:
    torch.manual_seed(1000 + rank)
    return torch.randn(m, n)


def _same_everywhere(seen: list) -> str:
    assert all(s == seen[0] for s in seen), seen
    return seen[0]


# Case 1: shard widths that differ between ranks (as torch.chunk of an uneven vocabulary).


def _widths(rank: int, world: int, op: str) -> str:
    shard = _rows(4, 1000 + (rank == 1), rank)
    if op == "greedy":
        return _error(sampling.greedy, shard)
    if op == "sample":
        return _error(sampling.sample, shard, torch.full((4,), 0.8), torch.arange(4), top_k=5)
    return _error(sampling.VocabParallelSampler, shard.shape[1], 8, "cpu")


def _every_width_case(rank: int, world: int) -> list[str]:
    """Each case fails on every rank and builds nothing, so one set of ranks runs them all."""
    return [_widths(rank, world, op) for op in ("greedy", "sample", "sampler")]


@pytest.mark.parametrize("world", WORLDS)
def test_different_widths_raise_the_same_error(world: int) -> None:
    per_rank = run_ranks(_every_width_case, world)
    for case in zip(*per_rank, strict=True):
        seen = _same_everywhere(list(case))
        assert seen.startswith("ValueError") and "columns differs between ranks" in seen, seen


def _widths_unchecked(rank: int, world: int) -> str:
    import logits_gather.sampling.sampler as sampler

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sampler, "agree", lambda *args, **kwargs: None)
        return _widths(rank, world, "greedy")


def test_without_the_construction_check_widths_give_different_tokens() -> None:
    seen = run_ranks(_widths_unchecked, 2)
    assert all(s.startswith("returned") for s in seen) and seen[0] != seen[1], seen


# Case 2: per-call arguments that differ between ranks, with check_calls.

ARGUMENTS = ["temperature", "seed", "positions", "top_k", "top_p", "min_p", "top_n", "op"]


def _call(rank: int, which: str, own: bool) -> str:
    m, n = 6, 64
    shard = _rows(m, n, rank)
    off = rank == 1  # the rank whose argument differs
    t = torch.full((m,), 0.8 + 0.1 * (off and which == "temperature"))
    seed = torch.arange(m) + (off and which == "seed")
    pos = torch.arange(m) * (1 + (off and which == "positions"))
    k = 5 + (off and which == "top_k")
    p = 0.9 - 0.1 * (off and which == "top_p")
    mp = 0.05 + 0.01 * (off and which == "min_p")
    target = sampling.VocabParallelSampler(n, 8, "cpu") if own else sampling
    if which == "top_n":
        return _error(target.logprobs, shard, torch.arange(m), top_n=2 + off)
    if which == "op" and off:
        return _error(target.greedy, shard)
    return _error(target.sample, shard, t, seed, pos, top_k=k, top_p=p, min_p=mp)


def _every_argument(rank: int, world: int) -> list[str]:
    """Each call fails on every rank, and every rank counted it, so the same ranks (and
    the same cached sampler) go on to the next; ``seed`` and ``top_n`` also on a user's
    sampler, not only the functions'."""
    cases = [(which, False) for which in ARGUMENTS] + [("seed", True), ("top_n", True)]
    return [_call(rank, which, own) for which, own in cases]


@pytest.mark.parametrize("world", WORLDS)
def test_different_arguments_raise_the_same_error(world: int) -> None:
    per_rank = run_ranks(_every_argument, world, env=CHECKED)
    for case in zip(*per_rank, strict=True):
        seen = _same_everywhere(list(case))
        assert seen.startswith("ValueError: logits_gather.sampling call check"), seen
        assert "differs between ranks" in seen, seen


def _fingerprint_off(rank: int, world: int) -> str:
    import logits_gather.sampling.agreement as agreement

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agreement, "fingerprint", lambda values: 0)
        return _call(rank, "seed", False)


def test_without_the_fingerprint_different_seeds_go_through() -> None:
    seen = run_ranks(_fingerprint_off, 2, env=CHECKED)
    assert all(s.startswith("returned") for s in seen), seen


# Case 3: a bad input on one rank only; and a different M on each rank.


def _bad_on_one(rank: int, world: int) -> list[str]:
    good = _rows(4, 64, rank)
    bad = good.to(torch.int64) if rank == 1 else good
    first = _error(sampling.greedy, bad)
    second = _error(sampling.greedy, good)  # every rank counted the failed call
    return [first, second]


@pytest.mark.parametrize("world", WORLDS)
def test_a_bad_input_on_one_rank_raises_everywhere(world: int) -> None:
    seen = run_ranks(_bad_on_one, world, env=CHECKED)
    first = _same_everywhere([s[0] for s in seen])
    assert "rejected input on rank 1" in first and "shard.dtype" in first, first
    second = _same_everywhere([s[1] for s in seen])
    assert second.startswith("returned"), second


def _bad_unchecked(rank: int, world: int) -> str:
    shard = _rows(4, 64, rank)
    if rank == 1:
        error = _error(sampling.greedy, shard.to(torch.int64))
        sampling.greedy(shard)  # the peers' first call pairs with this one
        return error
    return _error(sampling.greedy, shard)


def test_without_check_calls_the_error_names_it() -> None:
    seen = run_ranks(_bad_unchecked, 2)
    assert seen[1].startswith("TypeError: shard.dtype") and "check_calls=True" in seen[1]
    assert seen[0].startswith("returned"), seen  # paired with rank 1's next call


def _different_m(rank: int, world: int) -> str:
    m = 8 + rank
    return _error(sampling.sample, _rows(m, 64, rank), torch.full((m,), 0.8), torch.arange(m))


@pytest.mark.parametrize("checked", [False, True])
def test_a_different_m_raises_the_same_error(checked: bool) -> None:
    seen = _same_everywhere(run_ranks(_different_m, 3, env=CHECKED if checked else None))
    assert seen.startswith("ValueError"), seen
    if checked:
        assert "M differs between ranks" in seen, seen
    else:
        assert "logits_gather.sampling: building the sampler" in seen, seen


# Case 5: calls after the process group is destroyed.


def _after_destroy(rank: int, world: int) -> list[str]:
    shard = _rows(4, 64, rank)
    sampler = sampling.VocabParallelSampler(64, 8, "cpu")
    sampling.greedy(shard)
    sampler.greedy(shard)
    sampling.free_samplers()
    dist.destroy_process_group()
    return [_error(sampling.greedy, shard), _error(sampler.greedy, shard)]


def test_calls_after_destroy_name_the_library() -> None:
    for functions, own in run_ranks(_after_destroy, 2):
        assert functions.startswith("RuntimeError: logits_gather.sampling was called"), functions
        assert own.startswith("RuntimeError: VocabParallelSampler(columns=64)"), own
        assert "destroy_process_group" in own, own
