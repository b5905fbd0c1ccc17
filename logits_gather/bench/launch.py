"""Starting the ranks: the run's plan, one spawned process per rank, or torchrun's.

The parent never touches a GPU (placement: ``plan.py``; checks before the start:
``preflight.py``). It watches a queue: every rank reports a
heartbeat at each step, then ``ok`` or its traceback. The first traceback ends
the run (the other ranks get a short grace period, then are killed, since they
are likely blocked in a collective with the dead rank); a rank that is silent
for ``--stall-timeout`` seconds, or dies without a word, ends it too.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import sys
import time
import traceback

from .cli import Config, UsageError, parse
from .plan import Plan, make_plan, rank_env
from .preflight import check_memory, check_out

GRACE_S = 5.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(cfg: Config, plan: Plan, rank: int, port: int, q) -> None:
    os.environ.update(rank_env(plan))
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(plan.tp),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(plan.tp),
        GLOO_SOCKET_IFNAME="lo",
    )
    try:
        from .worker import run

        run(cfg, plan, rank, beat=lambda label: q.put(("beat", rank, label)))
        q.put(("ok", rank, None))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        q.put(("error", rank, traceback.format_exc()))
        q.close()
        q.join_thread()
        os._exit(1)  # skip teardown: peers may be dead, and NCCL teardown could block


def _watch(procs, q, stall_s: float) -> list[str]:
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
            elif now - last[r][0] > stall_s:
                errors[r] = (
                    f"rank {r} stalled: no progress for {stall_s:.0f} s after step "
                    f"{last[r][1]!r} (killed)"
                )
            elif give_up_at is not None and now > give_up_at:
                errors[r] = f"rank {r} killed after another rank failed (at step {last[r][1]!r})"
        if errors and give_up_at is None:
            give_up_at = now + GRACE_S
    return [errors[r] for r in sorted(errors)]


def spawn(cfg: Config, plan: Plan) -> int:
    import torch.multiprocessing as mp

    os.environ.update(rank_env(plan))  # inherited by the children before anything starts
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_child, args=(cfg, plan, r, port, q), daemon=True, name=f"bench-rank{r}")
        for r in range(plan.tp)
    ]
    problems: list[str] = []
    try:
        for p in procs:
            p.start()
        problems = _watch(procs, q, cfg.stall_timeout)
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
        print(
            f"\nbenchmark FAILED ({plan.tp} ranks, {plan.mode}):\n" + "\n".join(problems),
            file=sys.stderr,
        )
        return 1
    return 0


def in_process(cfg: Config, plan: Plan) -> int:
    """torchrun started us: this process is one rank."""
    os.environ.update(rank_env(plan))
    from .worker import run

    run(cfg, plan, int(os.environ["RANK"]), beat=lambda label: None)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse(argv)
        plan = make_plan(cfg)
        check_out(cfg.out)
        check_memory(cfg, plan)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return in_process(cfg, plan) if plan.torchrun else spawn(cfg, plan)
