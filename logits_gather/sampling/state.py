"""What a sampler's paths share: :class:`State`, the one owner of a sampler's layout (rank,
columns, capacity), its buffers (exchanges, mailboxes, scalar filters' rows) and their
builds. :mod:`.fused.policy`, :mod:`.fused.cuts` and :mod:`.exact.filters` read and grow
it through its typed fields and methods; the sampler holds one."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .exact import ops
from .fused import mailbox


@dataclass(eq=False)
class State:
    """A sampler's shared state. ``capacity`` grows (:meth:`fit`); ``filled`` and ``held``
    are the scalar filters' rows (:func:`.fused.cuts.filled`)."""

    group: dist.ProcessGroup | None
    device: torch.device
    rank: int
    world_size: int
    columns: int
    capacity: int
    backend: str
    timeout_s: float
    boxes: mailbox.Mailboxes
    grow: bool = False
    """Whether :meth:`fit` grows ``capacity`` past a call's ``M`` (the module functions'
    samplers), rather than a check refusing such an ``M``."""
    exchanges: dict[int, ops.Exchange] = field(default_factory=dict)
    retired: list[ops.Exchange] = field(default_factory=list)
    """Grown exchanges' predecessors: a peer may still read them, and graphs captured with
    them do."""
    filled: dict[tuple[float | int, torch.dtype], torch.Tensor] = field(default_factory=dict)
    """Scalar filters' rows by ``(value, dtype)``."""
    held: list[torch.Tensor] = field(default_factory=list)
    """Those of ``filled`` that CUDA graphs read: kept for good."""
    ids: torch.Tensor = field(init=False)
    """This rank's global token ids (int64 ``[columns]``), the noise's counters."""

    def __post_init__(self) -> None:
        start = self.rank * self.columns
        self.ids = torch.arange(start, start + self.columns, dtype=torch.int64, device=self.device)

    @property
    def vocab(self) -> int:
        return self.columns * self.world_size

    def fit(self, m: int) -> None:
        """Doubles ``capacity`` past ``m`` rows (a checked shard's ``M``)."""
        if m > self.capacity:
            self.capacity = max(1 << (m - 1).bit_length(), 2 * self.capacity)

    def box(self, words: int, rows: int, capacity: int | None = None) -> mailbox.Mailbox:
        """The fused kernels' mailbox of ``words`` words per rank for ``rows`` rows, built
        for ``capacity`` rows (default: the sampler's)."""
        return self.boxes.get(words, rows, self.capacity if capacity is None else capacity)

    def exchange_for(self, width: int, rows: int) -> ops.Exchange:
        """The exchange of ``width`` fp32 words for ``rows`` rows (collective if built)."""
        ex = self.exchanges.get(width)
        if ex is None or ex.capacity < rows:
            try:
                new = ops.build(
                    width, rows, self.group, self.device, self.backend, self.capacity, ex
                )
            except ValueError as exc:  # raised on every rank: the build's agreement failed
                raise ValueError(
                    "VocabParallelSampler: growing its exchange for a larger M failed on every "
                    "rank; do all ranks make the same calls with the same M? (check_calls=True "
                    f"verifies each call) {exc}"
                ) from exc
            if ex is not None:  # a peer may still read it, and graphs captured with it do
                self.retired.append(ex)
            self.exchanges[width] = ex = new
        return ex
