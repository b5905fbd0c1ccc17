"""The emulated ranks' harness (``tests/emulated.py``) submits every rank's work in phases:
no rank queues anything after its n-th waiting launch before every rank queued its n-th
waiting launch. On CPU, with stand-ins for the fused kernels and CUDA's streams."""

from __future__ import annotations

import contextlib
import random
import threading
import time

import pytest
import torch

pytest.importorskip("triton")

from tests.emulated import Ranks  # noqa: E402

WAITERS = ("final", "one", "rest")


class _Stream:
    def wait_stream(self, other: object) -> None:
        pass


class _Fused:
    """Records ``(what, rank, phase)`` for each waiting launch into a shared log."""

    def __init__(self, log: list, lock: threading.Lock) -> None:
        self.log, self.lock = log, lock

    def _wait(self, rank: int, phase: int, what: str) -> None:
        time.sleep(random.random() * 0.005)
        with self.lock:
            self.log.append((what, rank, phase))

    def final(self, rank: int, phase: int) -> None:
        self._wait(rank, phase, "final")

    def one(self, rank: int, phase: int) -> None:
        self._wait(rank, phase, "one")

    def rest(self, rank: int, phase: int) -> None:
        self._wait(rank, phase, "rest")


@pytest.fixture
def ranks(monkeypatch: pytest.MonkeyPatch) -> Ranks:
    nothing = lambda *a, **k: contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", nothing)
    monkeypatch.setattr(torch.cuda, "device", nothing)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    made = Ranks(4, 64, 8, torch.device("cpu"))
    made.streams = [_Stream() for _ in range(made.world)]
    return made


def _fakes(ranks: Ranks) -> list:
    log: list = []
    lock = threading.Lock()
    ranks.fused = [_Fused(log, lock) for _ in range(ranks.world)]
    return log


def test_phases_never_overlap(ranks: Ranks) -> None:
    for seed in range(5):
        random.seed(seed)
        log = _fakes(ranks)

        def call(f: _Fused, r: int) -> int:
            for phase in range(6):
                time.sleep(random.random() * 0.005)  # the phase's writers, host side
                with f.lock:
                    f.log.append(("write", r, phase))
                getattr(f, WAITERS[phase % 3])(r, phase)
            return 10 * r

        assert ranks.run(call) == [0, 10, 20, 30]
        phases = [p for _, _, p in log]
        assert phases == sorted(phases), f"a rank ran ahead of a phase: {log}"
        assert len(log) == 2 * 6 * ranks.world
        for f in ranks.fused:  # the harness's wrappers are gone
            assert not set(WAITERS) & set(vars(f)), vars(f)


def test_a_failing_rank_raises_its_error(ranks: Ranks) -> None:
    _fakes(ranks)

    def call(f: _Fused, r: int) -> None:
        f.final(r, 0)
        if r == 2:
            raise ValueError("rank 2 failed")
        f.final(r, 1)  # the others would wait here for rank 2 forever

    start = time.monotonic()
    with pytest.raises(ValueError, match="rank 2 failed"):
        ranks.run(call)
    assert time.monotonic() - start < 10
