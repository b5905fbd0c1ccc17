"""One call per emulated rank, each in its own thread, the ranks in step (no CUDA needed).

:class:`scripts.support.emulated.Ranks` queues each rank's kernels on its own stream. CUDA maps
streams onto a limited number of hardware queues (under MPS every client's streams share
one pool), and a queued launch that waits for its own stream blocks every launch behind it
in its queue. Ranks queued one whole call after another can then deadlock: rank A's
round-2 writer, waiting for A's spinning round-1 reader, sits ahead of rank B's round-1
writer that the reader needs. :func:`in_phases` runs the ranks in phases instead: a phase
ends with a waiting launch, and no rank queues phase n + 1 before every rank queued phase
n, so whatever a waiting kernel needs is queued before anything that waits for it, on any
number of queues.

Measured on one H100, ``test_emulated_ranks_match_gathered[4]``: with the ranks queued
call after call it timed out at min-p, its first operation of two rounds, under MPS (tp 2
passed). In phases it passed under MPS (``LOGITS_GATHER_STRESS_ITERS=2``, 283 s with its
compiles) and without MPS at ``CUDA_DEVICE_MAX_CONNECTIONS=1``, where every stream shares
one hardware queue (8 s on cached kernels). Every other case of
``tests/sampling/test_emulated.py`` (tp 2 and 8, the rest-serves cases at tp 2 and 4,
the dense-split case) passed in phases under MPS on an H100 too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


def in_phases(
    ranks: Sequence[Any],
    waiters: Sequence[str],
    run: Callable[[int], Any],
    *,
    timeout_s: float = 60,
) -> list[Any]:
    """``[run(r) for every rank r]``, each in its own thread. While they run, the methods
    named ``waiters`` of ``ranks[r]`` (instance attributes set here, deleted after) meet
    every other rank's at a barrier once they return. Every rank must make the same
    number of such calls. A rank's error is raised here once every thread ended (the
    others leave their barrier at once); so is a barrier that waited ``timeout_s``."""
    world = len(ranks)
    phase = threading.Barrier(world, timeout=timeout_s)
    outs: list[Any] = [None] * world
    errors: list[BaseException] = []
    for obj in ranks:
        for name in waiters:
            real = getattr(obj, name)

            def then_meet(*args: Any, real: Callable[..., Any] = real, **kw: Any) -> Any:
                out = real(*args, **kw)
                phase.wait()
                return out

            setattr(obj, name, then_meet)

    def rank(r: int) -> None:
        try:
            outs[r] = run(r)
        except threading.BrokenBarrierError as e:
            errors.append(e)
        except BaseException as e:  # noqa: BLE001 - raised below, after every thread
            errors.insert(0, e)
            phase.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for obj in ranks:
            for name in waiters:
                delattr(obj, name)
    if errors:
        raise errors[0]
    return outs


__all__ = ["in_phases"]
