"""LogitsGather: the public host class (validation, backend choice, dispatch)."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from .checks import PeerTimeoutError, agree, construction_problems, shard_error
from .fallback import DistributedGather

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
TIMEOUT_ENV = "LOGITS_GATHER_TIMEOUT_S"
_logged: set[str] = set()


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.info(message)


def _resolve_device(device: Any) -> tuple[Any, list[str]]:
    try:
        if device is None:
            cuda = torch.cuda.is_available()
            device = torch.device("cuda", torch.cuda.current_device()) if cuda else "cpu"
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type == "cuda" and not device.index < torch.cuda.device_count():
            return device, [f"device {device} does not exist ({torch.cuda.device_count()} GPUs)"]
        return device, []
    except (RuntimeError, TypeError, AssertionError) as exc:
        return device, [f"device must name a torch device, got {device!r} ({exc})"]


def _symm_mem_problem(device: torch.device) -> str | None:
    """Why this rank alone cannot use the kernel, or None."""
    if device.type != "cuda":
        return f"device is {device}, not CUDA"
    try:
        import triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no kernel
        return f"Triton is not importable ({type(exc).__name__}: {exc})"
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"torch symmetric memory is unavailable ({type(exc).__name__}: {exc})"
    return None


class LogitsGather:
    """All-gathers ``[M, columns]`` vocab shards into ``[M, world_size * columns]``.

    Construction is collective over ``group`` (``None``: the default group) and
    checks that every rank passed the same ``columns``, ``capacity``, ``dtype``,
    ``backend`` and ``graphs``. A call returns a view of an internal buffer: the
    result of call ``k`` stays valid for work enqueued on the calling stream
    until call ``k + 2`` is issued (graph mode: see the README). Calls allocate
    no memory. With one rank the input itself is returned.

    ``backend``: ``"auto"`` (the symmetric-memory kernel where every rank can map
    its peers' memory and Triton imports, else torch.distributed, with the
    reason logged once), ``"symm_mem"`` (raise if impossible) or
    ``"torch.distributed"``. ``timeout_s`` bounds how long the kernel waits for a
    peer (default ``$LOGITS_GATHER_TIMEOUT_S`` or 30 s). ``graphs=False`` saves
    the two graph-mode buffers and forbids capture.
    """

    def __init__(self, columns: int, capacity: int, device: torch.device | str | int | None = None,
                 group: dist.ProcessGroup | None = None, dtype: torch.dtype = torch.bfloat16,
                 backend: str = "auto", *, timeout_s: float | None = None,
                 graphs: bool = True) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("LogitsGather needs torch.distributed to be initialised "
                               "(call torch.distributed.init_process_group first)")
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("LogitsGather cannot be constructed during CUDA graph capture "
                               "(construction allocates and talks to every rank); build it first")
        self.group = group
        self.world_size: int = dist.get_world_size(group)
        self.rank: int = dist.get_rank(group)
        device, problems = _resolve_device(device)
        # The agreement below must run even for a bad device: use a valid one for it.
        talk_on = device if not problems else _resolve_device(None)[0]
        if timeout_s is None:
            try:
                timeout_s = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
            except ValueError:
                problems.append(f"{TIMEOUT_ENV} must be a number, got {os.environ[TIMEOUT_ENV]!r}")
                timeout_s = DEFAULT_TIMEOUT_S
        problems += construction_problems(columns, capacity, dtype, backend, timeout_s)
        if not isinstance(graphs, bool):
            problems.append(f"graphs must be a bool, got {graphs!r}")
        local, info = None, None
        wants_kernel = not problems and backend != "torch.distributed"
        if wants_kernel:
            local = _symm_mem_problem(device)
        if wants_kernel and local is None:
            from .symmetric import describe_device
            info = describe_device(device)
        record = {"columns": columns, "capacity": capacity, "dtype": str(dtype),
                  "backend": backend, "graphs": graphs}
        with self._on(talk_on):
            extras = agree(group, record, problems, extra=(local, info))
        self.columns: int = columns
        self.capacity: int = capacity
        self.dtype: torch.dtype = dtype
        self.device: torch.device = device
        self.timeout_s: float = float(timeout_s)
        self._index = device.index if device.type == "cuda" else -1
        with self._on(device):
            self.backend, self._impl = self._build(extras, backend, graphs)

    @staticmethod
    def _on(device: torch.device):
        return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()

    def _build(self, extras: list[Any], backend: str, graphs: bool) -> tuple[str, Any]:
        reasons = [f"rank {r}: {why}" for r, (why, _) in enumerate(extras) if why]
        if not reasons and backend != "torch.distributed":
            from .symmetric import peer_problem
            mine = peer_problem(self.rank, [info for _, info in extras])
            reasons = agree(self.group, {}, [], extra=mine)
            reasons = [f"rank {r}: {why}" for r, why in enumerate(reasons) if why]
        if backend == "torch.distributed":
            reasons = ["backend='torch.distributed' was requested"]
        if reasons and backend == "symm_mem":
            raise RuntimeError("backend='symm_mem' is impossible here: " + "; ".join(reasons))
        if not reasons and self.world_size > 1:
            impl, failure = self._try_symm_mem([info for _, info in extras], graphs)
            failures = [f"rank {r}: {f}" for r, f in enumerate(agree(self.group, {}, [], failure))
                        if f]
            if not failures:
                _log_once(f"LogitsGather: symmetric-memory kernel on {self.world_size} ranks")
                return "symm_mem", impl
            if backend == "symm_mem":
                raise RuntimeError("backend='symm_mem' failed to set up: " + "; ".join(failures))
            reasons = failures
        if self.world_size == 1:
            return ("torch.distributed" if reasons else "symm_mem"), (lambda shard: shard)
        if backend == "auto":
            _log_once("LogitsGather: using the torch.distributed fallback because "
                      + "; ".join(reasons))
        return "torch.distributed", DistributedGather(
            columns=self.columns, capacity=self.capacity, world_size=self.world_size,
            dtype=self.dtype, device=self.device, group=self.group)

    def _try_symm_mem(self, infos: list[Any], graphs: bool) -> tuple[Any, str | None]:
        from .kernel import FLAG_ROWS
        from .push import EAGER_SLOTS, GRAPH_SLOTS, PushGather
        from .symmetric import allocate, max_ctas

        ctas = max_ctas(infos)
        try:
            buffers = allocate(capacity=self.capacity, columns=self.columns,
                               slots=EAGER_SLOTS + (GRAPH_SLOTS if graphs else 0),
                               world_size=self.world_size, rank=self.rank, dtype=self.dtype,
                               device=self.device, ctas=ctas, flag_rows=FLAG_ROWS,
                               group=self.group)
            impl = PushGather(buffers, columns=self.columns, capacity=self.capacity,
                              world_size=self.world_size, rank=self.rank,
                              device=self.device, ctas=ctas, timeout_s=self.timeout_s,
                              graphs=graphs)
            return impl, None
        except Exception as exc:  # noqa: BLE001 - reported collectively, then re-decided
            log.debug("symmetric-memory setup failed", exc_info=True)
            return None, f"{type(exc).__name__}: {exc}"

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        """Gathers ``shard`` ``[M, columns]`` from every rank into ``[M, world_size * columns]``."""
        try:
            ok = (shard.dtype is self.dtype and shard.dim() == 2
                  and shard.shape[1] == self.columns and 0 < shard.shape[0] <= self.capacity
                  and shard.is_contiguous() and shard.get_device() == self._index)
        except AttributeError:
            ok = False
        if not ok:
            raise shard_error(shard, columns=self.columns, capacity=self.capacity,
                              dtype=self.dtype, device=self.device)
        return self._impl(shard)

    def check(self) -> None:
        """Raises :class:`PeerTimeoutError` if an earlier call timed out waiting for a peer."""
        status = getattr(self._impl, "_status_words", None)
        if status is not None and status[0]:
            raise self._impl.timeout_error()

    def __repr__(self) -> str:
        return (f"LogitsGather(columns={self.columns}, capacity={self.capacity}, "
                f"dtype={self.dtype}, device={self.device}, rank={self.rank}/{self.world_size}, "
                f"backend={self.backend!r})")


__all__ = ["LogitsGather", "PeerTimeoutError"]
