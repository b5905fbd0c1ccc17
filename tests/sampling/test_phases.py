"""scripts.support.phases.in_phases, which the emulated ranks (scripts/support/emulated.py)
run in: no rank runs past its n-th waiting call before every rank made its n-th, and a rank's
error surfaces instead of a hang. Stand-ins for the fused path's waiting launches."""

from __future__ import annotations

import random
import threading
import time

import pytest

from scripts.support.phases import in_phases

WAITERS = ("final", "one", "rest")


class _Rank:
    """Logs ``(what, rank, phase)`` for its waiting calls into a shared log."""

    def __init__(self, rank: int, log: list, lock: threading.Lock) -> None:
        self.rank, self.log, self.lock = rank, log, lock

    def note(self, what: str, phase: int) -> None:
        time.sleep(random.random() * 0.005)  # host work of random length
        with self.lock:
            self.log.append((what, self.rank, phase))

    def final(self, phase: int) -> None:
        self.note("final", phase)

    def one(self, phase: int) -> None:
        self.note("one", phase)

    def rest(self, phase: int) -> None:
        self.note("rest", phase)


def _ranks(world: int) -> tuple[list[_Rank], list]:
    log: list = []
    lock = threading.Lock()
    return [_Rank(r, log, lock) for r in range(world)], log


@pytest.mark.parametrize("world", [2, 4, 8])
def test_no_rank_runs_ahead_of_a_phase(world: int) -> None:
    for seed in range(4):
        random.seed(seed)
        ranks, log = _ranks(world)

        def run(r: int, ranks: list[_Rank] = ranks) -> int:
            for phase in range(6):
                ranks[r].note("write", phase)  # the phase's writers
                getattr(ranks[r], WAITERS[phase % 3])(phase)
            return 10 * r

        assert in_phases(ranks, WAITERS, run) == [10 * r for r in range(world)]
        phases = [p for _, _, p in log]
        assert phases == sorted(phases), f"a rank ran ahead of a phase: {log}"
        assert len(log) == 2 * 6 * world
        for rank in ranks:  # the wrappers are gone
            assert not set(WAITERS) & set(vars(rank)), vars(rank)


def test_rank_after_rank_would_run_ahead() -> None:
    """The order the test above checks is not a given: one rank's whole call after
    another's breaks it."""
    ranks, log = _ranks(2)
    for r in range(2):
        for phase in range(2):
            ranks[r].note("write", phase)
            ranks[r].final(phase)
    phases = [p for _, _, p in log]
    assert phases != sorted(phases)


def test_a_failing_rank_raises_its_own_error() -> None:
    ranks, _ = _ranks(4)

    def run(r: int) -> None:
        ranks[r].final(0)
        if r == 2:
            raise ValueError("rank 2 failed")
        ranks[r].final(1)  # the others would wait here for rank 2 for good

    start = time.monotonic()
    with pytest.raises(ValueError, match="rank 2 failed"):
        in_phases(ranks, WAITERS, run)
    assert time.monotonic() - start < 10
    assert not any(set(WAITERS) & set(vars(rank)) for rank in ranks)


def test_unequal_waits_time_out() -> None:
    """A rank that makes one waiting call fewer leaves the others at the barrier: the
    barrier's timeout ends the run with an error, not a hang."""
    ranks, _ = _ranks(2)

    def run(r: int) -> None:
        for phase in range(2 - r):
            ranks[r].final(phase)

    with pytest.raises(threading.BrokenBarrierError):
        in_phases(ranks, WAITERS, run, timeout_s=0.5)
