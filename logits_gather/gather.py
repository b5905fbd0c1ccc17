"""LogitsGather: the public host class (validation, backend choice, dispatch)."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from . import symmetric
from .checks import (
    PeerTimeoutError,
    agree,
    construction_problems,
    on_device,
    resolve_device,
    resolve_options,
    shard_error,
)
from .fallback import DistributedGather
from .logs import log_once

log = logging.getLogger(__name__)


class LogitsGather:
    """All-gathers ``[M, columns]`` vocab shards into ``[M, world_size * columns]``.

    Construction is collective over ``group`` (``None``: the default group) and
    checks that every rank passed the same ``columns``, ``capacity``, ``dtype``,
    ``backend``, ``graphs``, ``on_timeout`` and ``check_calls``. Calls are
    collective too: every rank makes the same calls, in the same order, with the
    same M (see docs/gather.md). A call returns a view of an internal
    buffer: the result of call ``k`` stays valid for work enqueued on the calling
    stream until call ``k + 2`` is issued (graph mode: docs/gather.md). Calls
    allocate no memory. With one rank the input itself is returned. Results never
    carry autograd history (the gather is not differentiable).

    ``backend``: ``"auto"`` (the symmetric-memory kernel where every rank can map
    its peers' memory and Triton imports, else torch.distributed, with the
    reason logged once), ``"symm_mem"`` (raise if impossible) or
    ``"torch.distributed"``. ``timeout_s`` bounds how long a rank waits for a
    peer (default ``$LOGITS_GATHER_TIMEOUT_S`` or 30 s): the kernel, the call
    check and the gloo fallback honour it; NCCL's own timeout governs the NCCL
    fallback. ``on_timeout`` (default ``$LOGITS_GATHER_ON_TIMEOUT`` or
    ``"trap"``): what the kernel does when it times out, ``"trap"`` (abort on the
    device, so no incomplete result is ever consumed; the CUDA context is lost) or
    ``"raise"`` (the timed-out call returns incomplete data; the next call and
    :meth:`check` raise). ``check_calls`` (default ``$LOGITS_GATHER_CHECK_CALLS``
    or off): before every call, verify that all ranks agree on the call and
    its input, and raise the same ``ValueError`` everywhere if not (one small
    host-side exchange per call). ``graphs=False`` saves the two graph-mode
    buffers and forbids capture.
    """

    def __init__(
        self,
        columns: int,
        capacity: int,
        device: torch.device | str | int | None = None,
        group: dist.ProcessGroup | None = None,
        dtype: torch.dtype = torch.bfloat16,
        backend: str = "auto",
        *,
        timeout_s: float | None = None,
        graphs: bool = True,
        on_timeout: str | None = None,
        check_calls: bool | None = None,
    ) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "LogitsGather needs torch.distributed to be initialised "
                "(call torch.distributed.init_process_group first)"
            )
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise TypeError(
                f"group must be a torch.distributed ProcessGroup or None, "
                f"got {type(group).__name__}"
            )
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "LogitsGather cannot be constructed during CUDA graph capture "
                "(construction allocates and talks to every rank); build it first"
            )
        self.group = group
        self.world_size: int = dist.get_world_size(group)
        self.rank: int = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError(
                f"this process (global rank {dist.get_rank()}) is not a member of "
                f"group {group!r}; only its members may build a LogitsGather on it"
            )
        device, problems = resolve_device(device)
        # The agreement below must run even for a bad device: use a valid one for it.
        talk_on = device if not problems else resolve_device(None)[0]
        timeout_s, on_timeout, check_calls, more = resolve_options(
            timeout_s, on_timeout, check_calls
        )
        problems += more + construction_problems(columns, capacity, dtype, backend, graphs)
        local, info = None, None
        wants_kernel = not problems and backend != "torch.distributed"
        if wants_kernel:
            local = symmetric.local_problem(device)
        if wants_kernel and local is None:
            info = symmetric.describe_device(device)
        record = {
            "columns": columns,
            "capacity": capacity,
            "dtype": str(dtype),
            "backend": backend,
            "graphs": graphs,
            "on_timeout": on_timeout,
            "check_calls": check_calls,
        }
        with on_device(talk_on):
            extras = agree(group, record, problems, extra=(local, info))
        self.columns: int = columns
        self.capacity: int = capacity
        self.dtype: torch.dtype = dtype
        self.device: torch.device = device
        self.timeout_s: float = timeout_s
        self.on_timeout: str = on_timeout
        self.check_calls: bool = check_calls
        self._failed: str | None = None
        self._graphs = graphs
        self._head: Any = None
        with on_device(device):
            self.backend, self._impl = self._build(extras, backend, graphs)
            self._calls = None
            if check_calls and self.world_size > 1:
                from .calls import CallCheck

                self._calls = CallCheck(
                    group,
                    timeout_s=timeout_s,
                    columns=columns,
                    capacity=capacity,
                    dtype=dtype,
                    device=device,
                )

    def _failures(self, step: str, failure: str | None) -> list[str]:
        """Every rank's failure at ``step`` (collective); one line if all ranks saw the same.
        The step name is compared too: ranks that reached different steps raise together."""
        every = agree(self.group, {"step": step}, [], extra=failure)
        if all(f == every[0] for f in every):
            return [every[0]] if every[0] else []
        return [f"rank {r}: {f}" for r, f in enumerate(every) if f]

    def _build(self, extras: list[Any], backend: str, graphs: bool) -> tuple[str, Any]:
        reasons = [f"rank {r}: {why}" for r, (why, _) in enumerate(extras) if why]
        if not reasons and backend != "torch.distributed":
            mine = symmetric.peer_problem(self.rank, [info for _, info in extras])
            reasons = agree(self.group, {"step": "peer access"}, [], extra=mine)
            reasons = [f"rank {r}: {why}" for r, why in enumerate(reasons) if why]
        if backend == "torch.distributed":
            reasons = ["backend='torch.distributed' was requested"]
        if reasons and backend == "symm_mem":
            raise RuntimeError("backend='symm_mem' is impossible here: " + "; ".join(reasons))
        if not reasons and self.world_size > 1:
            impl, failure = self._try_symm_mem([info for _, info in extras], graphs)
            failures = self._failures("symm_mem setup", failure)
            if not failures:
                log_once(log, f"LogitsGather: symmetric-memory kernel on {self.world_size} ranks")
                return "symm_mem", impl
            del impl
            if backend == "symm_mem":
                raise RuntimeError("backend='symm_mem' failed to set up: " + "; ".join(failures))
            reasons = failures
        if self.world_size == 1:
            return ("torch.distributed" if reasons else "symm_mem"), (lambda shard: shard)
        if backend == "auto":
            # On a GPU the caller expected the kernel: say why not where it is seen.
            level = logging.WARNING if self.device.type == "cuda" else logging.INFO
            log_once(
                log,
                "LogitsGather: using the torch.distributed fallback because " + "; ".join(reasons),
                level,
            )
        impl, failure = None, None
        try:
            impl = DistributedGather(
                columns=self.columns,
                capacity=self.capacity,
                world_size=self.world_size,
                dtype=self.dtype,
                device=self.device,
                group=self.group,
                timeout_s=self.timeout_s,
            )
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory on one rank: agree first
            failure = f"{type(exc).__name__}: {exc}"
        failures = self._failures("fallback allocation", failure)
        if failures:
            raise RuntimeError(
                "LogitsGather could not allocate the torch.distributed "
                "fallback's buffers: " + "; ".join(failures)
            )
        return "torch.distributed", impl

    def _try_symm_mem(self, infos: list[Any], graphs: bool) -> tuple[Any, str | None]:
        """Allocation (agreed inside :func:`.symmetric.allocate`), then compilation; the
        caller agrees on the outcome, so a failure on one rank never strands the others."""
        try:
            from .kernel import FLAG_ROWS
            from .push import PushGather
            from .slots import slot_count

            ctas = symmetric.max_ctas(infos)
            buffers = symmetric.allocate(
                capacity=self.capacity,
                columns=self.columns,
                slots=slot_count(graphs),
                world_size=self.world_size,
                rank=self.rank,
                dtype=self.dtype,
                device=self.device,
                ctas=ctas,
                flag_rows=FLAG_ROWS,
                group=self.group,
            )
            impl = PushGather(
                buffers,
                columns=self.columns,
                capacity=self.capacity,
                world_size=self.world_size,
                rank=self.rank,
                device=self.device,
                ctas=ctas,
                timeout_s=self.timeout_s,
                graphs=graphs,
                on_timeout=self.on_timeout,
            )
            return impl, None
        except Exception as exc:  # noqa: BLE001 - reported collectively, then re-decided
            log.debug("symmetric-memory setup failed", exc_info=True)
            return None, f"{type(exc).__name__}: {exc}"

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        """Gathers ``shard`` ``[M, columns]`` from every rank into ``[M, world_size * columns]``."""
        if self._failed is not None:
            raise PeerTimeoutError(self._failed)
        if not dist.is_initialized():
            raise self._destroyed()
        try:
            ok = (
                shard.dtype is self.dtype
                and shard.dim() == 2
                and shard.shape[1] == self.columns
                and 0 < shard.shape[0] <= self.capacity
                and shard.is_contiguous()
                and shard.device == self.device
            )
        except AttributeError:
            ok = False
        if self._calls is not None:
            self._check_call(shard, ok)  # collective: the same error on every rank
        elif not ok:
            raise shard_error(
                shard,
                columns=self.columns,
                capacity=self.capacity,
                dtype=self.dtype,
                device=self.device,
            )
        if shard.requires_grad:  # results never carry autograd history
            shard = shard.detach()
        return self._guarded(self._impl, shard)

    def linear(
        self, hidden: torch.Tensor, weight: torch.Tensor, *, fused: bool | None = None
    ) -> torch.Tensor:
        """The LM head and the gather: what ``self(F.linear(hidden, weight))`` returns.

        ``hidden`` ``[M, H]`` is the same on every rank, ``weight`` ``[columns, H]`` is this
        rank's slice (``nn.Linear``'s layout). The result ``[M, world_size * columns]`` is a
        view of the same buffers as ``__call__``'s, with the same lifetime, timeout and
        graph contract (a ``linear`` call counts as one call). ``fused=None`` takes the
        fused kernel where the tile table chose it, else ``F.linear`` + the gather (the
        reason logged once); ``True`` forces the kernel (``ValueError`` if impossible),
        ``False`` never takes it. The first call per hidden size compiles (collectively);
        make it eagerly before capturing. See docs/fused-head.md.
        """
        if self._failed is not None:
            raise PeerTimeoutError(self._failed)
        if not dist.is_initialized():
            raise self._destroyed()
        if self._head is None:
            from .head.linear import HeadLinear

            self._head = HeadLinear(
                group=self.group,
                world_size=self.world_size,
                backend=self.backend,
                columns=self.columns,
                capacity=self.capacity,
                dtype=self.dtype,
                device=self.device,
                graphs=self._graphs,
                gather=self._impl,
                check_call=self._check_call if self._calls is not None else None,
                guard=self._guarded,
            )
        return self._head(hidden, weight, fused)

    def _destroyed(self) -> RuntimeError:
        return RuntimeError(
            f"{self!r} was called after torch.distributed's process group was destroyed: "
            "free it before dist.destroy_process_group(), and build a new LogitsGather "
            "after init_process_group"
        )

    def _check_call(self, tensor: torch.Tensor, ok: bool, **kwargs: Any) -> None:
        """The collective call check; a peer's timeout there fails this object."""
        try:
            self._calls(tensor, ok, **kwargs)
        except PeerTimeoutError as exc:
            self._failed = str(exc)
            raise

    def _guarded(self, fn: Any, *args: Any) -> torch.Tensor:
        """``fn(*args)``, turning a kernel's timeout (or trap) into a ``PeerTimeoutError``."""
        try:
            return fn(*args)
        except PeerTimeoutError as exc:
            self._failed = str(exc)
            raise
        except RuntimeError as exc:
            self._raise_recorded(exc)

    def _timeout_error(self) -> PeerTimeoutError | None:
        """The kernel's timeout, read from its pinned status block, or None."""
        recorded = getattr(self._impl, "recorded_timeout", None)  # the fallback has none
        return None if recorded is None else recorded()

    def _raise_recorded(self, exc: RuntimeError) -> NoReturn:
        """Raises the recorded timeout chained to ``exc`` (a trap's CUDA error), failing
        this object; ``exc`` itself when no timeout was recorded (other work failed)."""
        timeout = self._timeout_error()
        if timeout is None:
            raise exc
        self._failed = str(timeout)
        raise timeout from exc

    def check(self, synchronize: bool = True) -> None:
        """Raises :class:`PeerTimeoutError` if an earlier call timed out waiting for a peer.

        With ``synchronize`` (the default; skipped during graph capture) it first
        waits for the device's queued work, so that it judges every call issued so far,
        replays included. When that wait fails because a kernel trapped
        (``on_timeout="trap"``), the CUDA error is chained to the ``PeerTimeoutError``
        read from the kernel's status block; a CUDA error without a recorded timeout
        comes from other work and is re-raised unchanged.
        """
        if self._failed is not None:
            raise PeerTimeoutError(self._failed)
        timeout = self._timeout_error()
        if synchronize and self.device.type == "cuda":
            try:  # after a trap every CUDA call raises the context's sticky error
                if not torch.cuda.is_current_stream_capturing():
                    torch.cuda.synchronize(self.device)
            except RuntimeError as exc:
                self._raise_recorded(exc)
            timeout = self._timeout_error()
        if timeout is not None:
            self._failed = str(timeout)
            raise timeout

    def __repr__(self) -> str:
        return (
            f"LogitsGather(columns={self.columns}, capacity={self.capacity}, "
            f"dtype={self.dtype}, device={self.device}, rank={self.rank}/{self.world_size}, "
            f"backend={self.backend!r}, on_timeout={self.on_timeout!r}, "
            f"check_calls={self.check_calls})"
        )


__all__ = ["LogitsGather", "PeerTimeoutError"]
