"""Mailboxes: the symmetric buffers of the fused kernels' exchanges (protocol:
:mod:`..kernels.exchange`). A :class:`Mailbox` is built collectively by every rank with the same
arguments; :class:`Mailboxes` keeps a sampler's, one per row width.
"""

from __future__ import annotations

import ctypes
import logging
import warnings

import torch
import torch.distributed as dist

from ... import symmetric
from ...checks import PeerTimeoutError, agree
from ..exact import ops

log = logging.getLogger(__name__)


def status_block(dead: torch.Tensor, *, pinned: bool) -> torch.Tensor:
    """A mailbox's status block: int32 words 0-3 record a timed-out wait
    (:func:`logits_gather.kernel.timed_out`), in host memory (pinned on CUDA) that the host
    still reads after a trap; words 4-5 hold the address of ``dead``, the sampler's device
    flag, which a wait that timed out and returns sets (:func:`..kernels.exchange.wait`). The
    fallback polls that flag (:func:`..kernels.topp_exact.nucleus_rest`), never this block: a
    read of host memory from every program cost about 135 us per row."""
    block = torch.zeros(8, dtype=torch.int32, pin_memory=pinned)
    block.view(torch.int64)[2] = dead.data_ptr()
    return block


class Mailbox:
    """``int64 [2, capacity, 2 * words]`` LL slots on every rank, a private epoch and
    arrival count per row, and every rank's base address. ``words`` is the row's width in
    64-bit words (all ranks' parts together)."""

    def __init__(
        self,
        words: int,
        capacity: int,
        group: dist.ProcessGroup | None,
        device: torch.device,
        *,
        timeout_s: float,
        trap: bool,
        dead: torch.Tensor,
    ) -> None:
        self.words, self.capacity = words, capacity
        self.row_elems = 2 * words
        self.parity_stride = capacity * self.row_elems
        world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        self.world = world
        numel = 2 * self.parity_stride
        self._handle = None
        data, failure = None, None
        try:
            if world == 1:
                data = torch.zeros(numel, dtype=torch.int64, device=device)
            else:
                import torch.distributed._symmetric_memory as symm_mem

                data = symm_mem.empty(numel, dtype=torch.int64, device=device)
                data.zero_()
            torch.cuda.synchronize(device)  # zero before any peer can write
        except Exception as exc:  # noqa: BLE001 - agreed below, raised on every rank
            failure = f"{type(exc).__name__}: {exc}"
        every = agree(
            group,
            {"words": words, "capacity": capacity},
            [],
            extra=failure,
            what="sampling mailbox allocation",
        )
        failed = [f"rank {r}: {f}" for r, f in enumerate(every) if f]
        if failed:
            del data
            raise symmetric.AllocationError(
                f"sampling mailbox ({numel} int64 per rank) failed on " + "; ".join(failed)
            )
        if world == 1:
            bases = [data.data_ptr()]
        else:
            group_ = group if group is not None else dist.group.WORLD
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
                if enable is not None:
                    enable(group_.group_name)
            self._handle = symm_mem.rendezvous(data, group_)
            bases = symmetric.peer_bases(data, self._handle, rank)
        self.data = data
        self.peers = torch.tensor(bases, dtype=torch.int64, device=device)
        self.epoch = torch.zeros(capacity, dtype=torch.int32, device=device)
        self.arrivals = torch.zeros(capacity, dtype=torch.int32, device=device)  # one launch
        self.plans: dict[tuple, object] = {}  # bound launches over this mailbox (rounds.py)
        self.timeout_us = max(1, int(timeout_s * 1e6))
        self.trap = trap
        self.flags: torch.Tensor | None = None  # top-k's overflow marks, if used
        self.dead = dead
        self.status = status_block(dead, pinned=True)
        self.status_ptr = self.status.data_ptr()
        self._status_words = (ctypes.c_int32 * 4).from_address(self.status_ptr)
        log.debug("sampling mailbox: %d words x %d rows on %d ranks", words, capacity, world)

    def check(self) -> None:
        """Raises :class:`~logits_gather.checks.PeerTimeoutError` if a wait timed out."""
        if self._status_words[0]:
            _, cta, seen, target = list(self._status_words)
            after = (
                "the kernel trapped, so the CUDA context is unusable; restart the process"
                if self.trap
                else "the result of that call is wrong and this sampler is unusable"
            )
            raise PeerTimeoutError(
                f"logits_gather.sampling timed out waiting for a peer's values (CTA {cta} saw "
                f"epoch {seen}, needed {target}, in the mailbox of {self.words // self.world} "
                f"words per rank and row): a peer rank is dead, stalled, or made different "
                f"sampling calls; {after}"
            )


class Mailboxes:
    """A sampler's mailboxes, one per row width; each built collectively on first use, and
    rebuilt with twice the rows when a call needs more (the old one stays alive: a peer
    may still be writing into it)."""

    def __init__(
        self, group: dist.ProcessGroup | None, device: torch.device, timeout_s: float, trap: bool
    ) -> None:
        self.group, self.device, self.timeout_s, self.trap = group, device, timeout_s, trap
        self.world = dist.get_world_size(group)
        self.dead = torch.zeros(1, dtype=torch.int32, device=device)
        """Set by any of this sampler's waits that timed out and returned (its status block)."""
        self._boxes: dict[int, Mailbox] = {}
        self._retired: list[Mailbox] = []

    def get(self, words: int, rows: int, capacity: int) -> Mailbox:
        """The mailbox for ``words`` words per rank and row, with room for ``rows``."""
        mb = self._boxes.get(words)
        if mb is not None and mb.capacity >= rows:
            return mb
        if ops.capturing(self.device):
            raise RuntimeError(
                f"logits_gather.sampling: no mailbox of {words} words for {rows} rows; it "
                "is built collectively on first use, which cannot happen inside CUDA graph "
                "capture: run the same operation (same top_k/top_n, M >= this M) once before "
                "capture"
            )
        capacity = max(rows, capacity, 2 * mb.capacity if mb is not None else 0)
        with torch.cuda.device(self.device):  # collectives and symm_mem on this GPU
            new = Mailbox(
                words * self.world,
                capacity,
                self.group,
                self.device,
                timeout_s=self.timeout_s,
                trap=self.trap,
                dead=self.dead,
            )
        if mb is not None:
            self._retired.append(mb)
        self._boxes[words] = new
        return new

    def check(self) -> None:
        for mb in [*self._boxes.values(), *self._retired]:
            mb.check()
