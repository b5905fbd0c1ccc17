"""The one rank launcher of every benchmark: one spawned process per rank, or torchrun's.

The parent never touches a GPU. It watches a queue: every rank reports a heartbeat
at each step, then ``ok`` or its traceback. The first traceback ends the run (the
other ranks get a short grace period, then are killed, since they are likely blocked
in a collective with the dead rank); a rank that is silent for ``stall_s`` seconds,
or dies without a word, ends it too.

A rank runs ``target(*args, rank, beat)``, with ``beat(label)`` its heartbeat.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

GRACE_S = 5.0
Target = Callable[..., None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(
    target: Target,
    args: tuple,
    env: Mapping[str, str],
    world: int,
    rank: int,
    port: int,
    q: Any,
    hard_exit: bool,
) -> None:
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        GLOO_SOCKET_IFNAME="lo",
    )
    try:
        target(*args, rank, lambda label: q.put(("beat", rank, label)))
        q.put(("ok", rank, None))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        q.put(("error", rank, traceback.format_exc()))
        q.close()
        q.join_thread()
        os._exit(1)  # skip teardown: peers may be dead, and NCCL teardown could block
    if hard_exit:  # the results are out: skip a teardown that could hang or abort
        q.close()
        q.join_thread()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _watch(procs: list, q: Any, stall_s: float | None) -> list[str]:
    """Waits for every rank; returns the problems, empty when all went well."""
    n = len(procs)
    done: set[int] = set()
    errors: dict[int, str] = {}
    last = {r: (time.monotonic(), "starting") for r in range(n)}
    give_up_at = None
    while len(done) + len(errors) < n:
        try:
            kind, rank, payload = q.get(timeout=0.5)
            last[rank] = (time.monotonic(), payload if kind == "beat" else kind)
            if kind == "ok":
                done.add(rank)
            elif kind == "error":
                errors[rank] = f"rank {rank} raised:\n{payload}"
                give_up_at = give_up_at or time.monotonic() + GRACE_S
        except queue_mod.Empty:
            pass
        now = time.monotonic()
        for r, p in enumerate(procs):
            if r in done or r in errors:
                continue
            if p.exitcode is not None and q.empty():
                errors[r] = f"rank {r} died with exit code {p.exitcode} at step {last[r][1]!r}"
            elif stall_s is not None and now - last[r][0] > stall_s:
                errors[r] = (
                    f"rank {r} stalled: no progress for {stall_s:.0f} s after step "
                    f"{last[r][1]!r} (killed)"
                )
            elif give_up_at is not None and now > give_up_at:
                errors[r] = f"rank {r} killed after another rank failed (at step {last[r][1]!r})"
        if errors and give_up_at is None:
            give_up_at = now + GRACE_S
    return [errors[r] for r in sorted(errors)]


def spawn(
    target: Target,
    args: tuple,
    *,
    world: int,
    env: Mapping[str, str],
    stall_s: float | None,
    what: str,
    hard_exit: bool = False,
) -> int:
    """Runs ``world`` ranks, each with ``env`` set before anything starts; 0 when every
    rank finished, else 1 after printing the problems (``what`` names the run)."""
    import torch.multiprocessing as mp

    os.environ.update(env)  # inherited by the children before anything starts
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_child,
            args=(target, args, env, world, r, port, q, hard_exit),
            daemon=True,
            name=f"bench-rank{r}",
        )
        for r in range(world)
    ]
    problems: list[str] = []
    try:
        for p in procs:
            p.start()
        problems = _watch(procs, q, stall_s)
    except KeyboardInterrupt:
        problems = ["interrupted"]
    finally:
        deadline = time.monotonic() + (10.0 if not problems else 1.0)
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        stuck = [p for p in procs if p.is_alive()]
        for p in stuck:
            p.kill()
            p.join(5)
        if stuck and not problems:
            print(
                f"warning: {len(stuck)} rank(s) did not exit within 10 s after finishing and "
                "were killed",
                file=sys.stderr,
            )
        q.close()
        q.join_thread()
    if problems:
        print(f"\nbenchmark FAILED ({what}):\n" + "\n".join(problems), file=sys.stderr)
        return 1
    return 0


def in_process(target: Target, args: tuple, env: Mapping[str, str]) -> int:
    """torchrun started us: this process is one rank."""
    os.environ.update(env)
    target(*args, int(os.environ["RANK"]), lambda label: None)
    return 0
