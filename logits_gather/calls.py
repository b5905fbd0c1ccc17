"""The per-call agreement behind ``LogitsGather(check_calls=True)``.

Every call is collective: each rank must make the same calls, in the same order,
with the same M. A rank that breaks this (a different M, a rejected input, a
skipped call) would otherwise make the gloo fallback abort or the kernel time
out after returning incomplete data. With ``check_calls`` on, a call first
exchanges a fixed-size record over a gloo channel, before any data moves:

    [object id, call index, M, dtype code, input rejected, operation, fingerprint]

The object id numbers the checked objects built on the channel (construction is
collective, so it agrees on every rank); the call index counts this object's
checked calls, rejected ones included. The operation is 0 for a gather and encodes
the hidden size and ``fused`` for ``linear``, so a rank that gathers while its peers
run the head (or passes another hidden size) is caught as well. Samplers
(:mod:`.sampling`) encode their operation and filters there, and put a fingerprint of
their per-row arguments in the last word (0 for a gather). The record always
has the same size, so two ranks in different calls never make gloo abort on a size mismatch. If any
rank's record differs or reports a rejected input, every rank knows it at once;
all then exchange descriptions (``all_gather_object``) and raise the same
``ValueError``, and no data has moved: the object stays usable, since every rank
counted the failed call.

What the record cannot show: a rank that skips a call of one object and later
calls that object again pairs its later call with the peers' earlier one (equal
indices); only a different M reveals it, else the ranks drift one call apart
until a wait exceeds ``timeout_s``.

The wait for peers is bounded by ``timeout_s``: a rank whose peers do not reach
the exchange raises :class:`PeerTimeoutError` and its object is unusable after
that (the abandoned exchange completes later against a peer's next check, which
then proceeds to a gather this rank never joins and times out there in turn).

The channel is the object's own group when that group runs gloo (CPU tensors),
else one gloo group per process group, created at the first checked
construction (``new_group`` over the group's ranks, with
``use_local_synchronization`` for a subgroup: torch then requires that every
rank creates its process groups in the same global order). The channels are held
weakly by their process group, so nothing here keeps a group alive once the caller
has dropped it (``dist.destroy_process_group()``): a group that outlives it until
interpreter exit can abort the process there ("terminate called without an active
exception", seen in 5 of 60 two-rank gloo runs on CPU that held one).
"""

from __future__ import annotations

import datetime
import weakref
from typing import Any

import torch
import torch.distributed as dist

from .checks import PeerTimeoutError, shard_error

_RECORD = 7
_DTYPE_CODES = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 3}
_channels: weakref.WeakKeyDictionary[dist.ProcessGroup, dist.ProcessGroup] = (
    weakref.WeakKeyDictionary()
)
_objects: dict[Any, int] = {}


def _all_gather_single(
    output: torch.Tensor, tensor: torch.Tensor, group: Any, async_op: bool
) -> Any:
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(output, tensor, group=group, async_op=async_op)


def _runs_gloo(group: dist.ProcessGroup | None) -> bool:
    """Whether ``group`` takes CPU tensors (gloo alone, or gloo next to NCCL)."""
    return "gloo" in str(dist.get_backend(group))


def _channel(group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """A gloo group with the ranks of ``group`` (collective over them)."""
    if _runs_gloo(group):
        return group
    pg = group if group is not None else dist.group.WORLD
    channel = _channels.get(pg)
    if channel is None:
        ranks = dist.get_process_group_ranks(pg)
        local = len(ranks) < dist.get_world_size()
        channel = dist.new_group(ranks, backend="gloo", use_local_synchronization=local)
        _channels[pg] = channel
    return channel


class CallCheck:
    """Callable ``(shard, ok)``: returns when every rank may go on with this call, else
    raises the same ``ValueError`` (or a local :class:`PeerTimeoutError`) on every rank."""

    def __init__(
        self,
        group: dist.ProcessGroup | None,
        *,
        timeout_s: float,
        columns: int,
        capacity: int,
        dtype: torch.dtype | None,
        device: torch.device,
        owner: str = "LogitsGather",
    ) -> None:
        self.owner = owner
        self._group = _channel(group)
        key = (self._group if self._group is not None else dist.group.WORLD).group_name
        self.object_id = _objects.get(key, 0)
        _objects[key] = self.object_id + 1
        self._world = dist.get_world_size(self._group)
        self._timeout = datetime.timedelta(seconds=timeout_s)
        self._spec = dict(columns=columns, capacity=capacity, dtype=dtype, device=device)
        self._mine = torch.zeros(_RECORD, dtype=torch.int64)
        self._all = torch.zeros(self._world * _RECORD, dtype=torch.int64)
        self.calls = 0

    def __call__(
        self,
        shard: Any,
        ok: bool,
        *,
        error: Exception | None = None,
        op: int = 0,
        fingerprint: int = 0,
        what: str = "",
    ) -> None:
        """``error``: what this rank's input was rejected for (default: judged as a shard).
        ``op``, ``fingerprint`` (int64) and ``what`` (its words, for the error) describe
        the call beyond the shard's M and dtype."""
        index = self.calls
        self.calls += 1
        m, code = -1, -1
        if isinstance(shard, torch.Tensor):
            m = shard.shape[0] if shard.dim() >= 1 else -1
            code = _DTYPE_CODES.get(shard.dtype, 0)
        record = (self.object_id, index, m, code, int(not ok), op, fingerprint)
        self._mine.copy_(torch.tensor(record))
        work = _all_gather_single(self._all, self._mine, self._group, True)
        try:
            work.wait(timeout=self._timeout)
        except RuntimeError as exc:
            raise PeerTimeoutError(
                f"{self.owner} call check: not every rank reached call {index} of checked "
                f"object #{self.object_id} within timeout_s={self._timeout.total_seconds():g} "
                "s: a peer skipped this call, is stalled or is dead; this object is unusable "
                "now"
            ) from exc
        rows = self._all.view(self._world, _RECORD)
        if ok and bool((rows == self._mine).all()):
            return
        self._disagree(shard, ok, index, rows, error, what)

    def _disagree(
        self,
        shard: Any,
        ok: bool,
        index: int,
        rows: torch.Tensor,
        error: Exception | None,
        what: str,
    ) -> None:
        """Every rank gets here together (they all saw the same rows)."""
        local = None if ok else (error or shard_error(shard, **self._spec))
        mine = f"object #{self.object_id}, call {index}, "
        if isinstance(shard, torch.Tensor):
            mine += f"M={shard.shape[0] if shard.dim() >= 1 else None}, dtype={shard.dtype}"
        else:
            mine += f"shard is a {type(shard).__name__}"
        if what:
            mine += f", {what}"
        if local is not None:
            mine += f"; input rejected: {type(local).__name__}: {local}"
        described: list[Any] = [None] * self._world
        dist.all_gather_object(described, mine, group=self._group)
        lines = [f"rank {r}: {d}" for r, d in enumerate(described)]
        columns = (
            (0, "object"),
            (1, "call index"),
            (2, "M"),
            (3, "dtype"),
            (5, "operation"),
            (6, "per-row arguments (their fingerprint)"),
        )
        for col, name in columns:
            if len(set(rows[:, col].tolist())) > 1:
                lines.append(f"{name} differs between ranks")
        bad = [r for r in range(self._world) if rows[r, 4]]
        if bad:
            lines.append("rejected input on rank " + ", ".join(map(str, bad)))
        error = ValueError(
            f"{self.owner} call check (check_calls=True) failed on every rank; "
            "no data moved:\n  " + "\n  ".join(lines)
        )
        if local is not None:
            raise error from local
        raise error
