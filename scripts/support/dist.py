"""One spawn helper for every distributed test.

``run_ranks(fn, world_size, *args)`` starts ``world_size`` processes with the
``spawn`` context, initialises a process group in each (gloo by default, on the
loopback interface), calls ``fn(rank, world_size, *args)`` and carries any
traceback back through a queue. Every join has a timeout, so a hung rank fails
the test instead of hanging the suite.

GPU runs pass ``device="cuda"``: ranks then sit on ``cuda:rank`` when there are
enough GPUs, or all share ``cuda:0`` (``colocate=True``) through
``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``. The process group stays gloo,
because NCCL refuses two ranks on one GPU; the library's kernel does not use it
on the hot path.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

from logits_gather.bench.plan import NVLS_OFF


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world_size, port, backend, env, args, queue, hard_exit=False) -> None:
    os.environ.update(NVLS_OFF)
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    import datetime

    import torch.distributed as dist

    try:
        dist.init_process_group(
            backend,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=120),
        )
        result = fn(rank, world_size, *args)
        queue.put((rank, "ok", result))
        if hard_exit:  # e.g. after a deliberate device trap: teardown could block
            queue.close()
            queue.join_thread()
            os._exit(0)
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 180.0,
    env: dict[str, str] | None = None,
    hard_exit: bool = False,
) -> list[Any]:
    """Runs ``fn(rank, world_size, *args)`` on ``world_size`` ranks; returns the
    per-rank results in rank order, or raises with every failing rank's
    traceback. ``hard_exit=True`` ends each rank with ``os._exit(0)`` right after it
    reports, skipping teardown (for ranks whose CUDA context was killed on purpose)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_child,
            args=(fn, rank, world_size, port, backend, dict(env or {}), args, queue, hard_exit),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    import queue as queue_mod
    import time

    results: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(results) < world_size and time.monotonic() < deadline:
        try:
            rank, status, payload = queue.get(timeout=0.5)
            results[rank] = (status, payload)
        except queue_mod.Empty:
            if all(not p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    problems = []
    for rank in range(world_size):
        if rank not in results:
            code = procs[rank].exitcode
            why = "hung (killed at the timeout)" if rank in hung else f"died, exit code {code}"
            problems.append(f"rank {rank}: {why}")
        elif results[rank][0] != "ok":
            problems.append(f"rank {rank} raised:\n{results[rank][1]}")
    if problems:
        raise AssertionError(f"{world_size}-rank run failed:\n" + "\n".join(problems))
    return [results[r][1] for r in range(world_size)]
