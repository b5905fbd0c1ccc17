"""The torch.distributed path: the same contract as the kernel, on any backend.

``all_gather_into_tensor`` (``all_gather_single`` where torch has it) gathers the
shards into a preallocated ``[W * m, N]`` staging area; one strided copy then
lays them out as ``[m, W * N]`` in one of two alternating output slots. Works
with NCCL (multi-node included) and with gloo on CPU. Writes only ever come
from this rank's own stream, so two slots give the next-but-one lifetime.

Row counts: on CPU tensors (gloo) every call first exchanges ``M`` (one int64 per rank,
small next to the shard), so ranks that pass different ``M`` all raise the same
``ValueError`` instead of gloo aborting the process on a size mismatch. On CUDA tensors
(NCCL) that would cost a second collective per call; there a different ``M`` is the
caller's contract to keep (``check_calls=True`` verifies it).

Timeouts: on CPU tensors (gloo) the all-gather is issued with ``async_op=True``
and waited for with ``timeout_s``; a rank whose peers do not arrive raises
:class:`PeerTimeoutError` (gloo honours the wait's timeout; the abandoned
operation still completes in gloo's worker thread later, so the object is
unusable afterwards, and a peer that arrives late completes the abandoned row-count
exchange, then times out in the all-gather: the group is out of step). On CUDA tensors
(NCCL) a bounded wait would block the host on every call, so the process group's own
timeout governs there.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from .checks import PeerTimeoutError

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class DistributedGather:
    """``[m, N]`` shards to ``[m, W * N]`` through a torch.distributed all-gather."""

    def __init__(
        self,
        *,
        columns: int,
        capacity: int,
        world_size: int,
        dtype: torch.dtype,
        device: torch.device,
        group: dist.ProcessGroup | None,
        timeout_s: float,
    ) -> None:
        self._n = columns
        self._w = world_size
        self._group = group
        self._staging = torch.empty(world_size * capacity * columns, dtype=dtype, device=device)
        self.slots = torch.empty((2, capacity, world_size * columns), dtype=dtype, device=device)
        self._calls = 0
        self._timeout = datetime.timedelta(seconds=timeout_s) if device.type == "cpu" else None
        if self._timeout is not None:
            self._m = torch.zeros(1, dtype=torch.int64)
            self._ms = torch.zeros(world_size, dtype=torch.int64)

    def _wait(self, out: torch.Tensor, mine: torch.Tensor, what: str) -> None:
        """A gloo all-gather of ``mine`` into ``out``, bounded by ``timeout_s``."""
        work = _all_gather(out, mine, group=self._group, async_op=True)
        try:
            work.wait(timeout=self._timeout)
        except RuntimeError as exc:
            raise PeerTimeoutError(
                f"LogitsGather (torch.distributed fallback) call {self._calls}: the peers did "
                f"not join the all-gather of {what} within timeout_s="
                f"{self._timeout.total_seconds():g} s: a peer is dead, stalled, or issued a "
                "different sequence of calls; this object is unusable now"
            ) from exc

    def _same_rows(self, m: int) -> None:
        """Raises the same ``ValueError`` on every rank when the ranks' ``M`` differ."""
        self._m.fill_(m)
        self._wait(self._ms, self._m, f"the row count (M={m})")
        ms = self._ms.tolist()
        if any(x != m for x in ms):
            self._calls += 1  # every rank counted this call, so the next ones still pair
            per_rank = ", ".join(f"rank {r}: M={x}" for r, x in enumerate(ms))
            raise ValueError(
                f"LogitsGather (torch.distributed fallback) call {self._calls - 1}: M differs "
                f"between ranks ({per_rank}); every rank must make the same calls with the "
                "same M. No data moved, and the object stays usable."
            )

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        m, n, w = shard.shape[0], self._n, self._w
        staging = self._staging[: w * m * n].view(w * m, n)
        if self._timeout is None:
            _all_gather(staging, shard, group=self._group)
        else:
            self._same_rows(m)
            self._wait(staging, shard, f"M={m} rows")
        out = self.slots[self._calls & 1, :m]
        self._calls += 1
        out.view(m, w, n).copy_(staging.view(w, m, n).transpose(0, 1))
        return out
