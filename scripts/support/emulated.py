"""Ranks of the fused sampling path emulated in one process.

Each emulated rank has its own :class:`~logits_gather.sampling.fused.fused.Fused` and its
own copy of every mailbox; every copy's peer table lists all ranks' copies, so the
real kernels run the real exchange. On a GPU each rank launches on its own CUDA
stream, from its own thread, the ranks in step (:mod:`scripts.support.phases`): a rank's waiting
kernel spins while the other ranks' writers run, as it does across processes, and its
grid is bounded so the writers always find room.
What this leaves out: processes, symmetric memory and NVLink (every copy is on one
GPU). What it adds: thousands of calls in seconds, at any tp's geometry, on one GPU.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from logits_gather.sampling.fused import fused
from logits_gather.sampling.fused.launcher import pdl_capable
from logits_gather.sampling.fused.mailbox import status_block
from scripts.support.phases import in_phases

WAITERS = ("final", "one", "rest")
"""The fused path's waiting launches (:class:`~logits_gather.sampling.fused.fused.Fused`)."""


class Box:
    """One rank's copy of a mailbox (the attributes the fused kernels read)."""

    def __init__(self, words: int, capacity: int, device: torch.device, timeout_s: float) -> None:
        self.words, self.capacity = words, capacity
        self.row_elems = 2 * words
        self.parity_stride = capacity * self.row_elems
        self.data = torch.zeros(2 * self.parity_stride, dtype=torch.int64, device=device)
        self.epoch = torch.zeros(capacity, dtype=torch.int32, device=device)
        self.arrivals = torch.zeros(words + capacity, dtype=torch.int32, device=device)
        self.plans: dict[tuple, object] = {}
        self.dead = torch.zeros(1, dtype=torch.int32, device=device)
        self.status = status_block(self.dead, pinned=device.type == "cuda")
        self.status_ptr = self.status.data_ptr()
        self._words = (ctypes.c_int32 * 4).from_address(self.status_ptr)
        self.timeout_us = max(1, int(timeout_s * 1e6))
        self.peers: torch.Tensor | None = None
        self.flags: torch.Tensor | None = None  # as Mailbox.flags

    def check(self) -> None:
        if self._words[0]:
            raise AssertionError(f"an emulated rank timed out: status {list(self._words)}")


class Ranks:
    """``world`` emulated ranks over ``columns`` columns each, rows up to ``capacity``."""

    def __init__(
        self,
        world: int,
        columns: int,
        capacity: int,
        device: torch.device,
        *,
        timeout_s: float = 20.0,
        wait_ctas: int | None = None,
        single_rows: int | None = None,
    ) -> None:
        self.world, self.columns, self.capacity, self.device = world, columns, capacity, device
        self.timeout_s = timeout_s
        self._boxes: dict[int, list[Box]] = {}
        self._making = threading.Lock()  # rank threads (run) may ask for a new size at once
        half = 0
        if device.type == "cuda":  # half the SMs wait, the rest write
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            half = max(1, sms // (2 * world))
        if wait_ctas is None:  # 0: one CTA per row
            wait_ctas = half
        if (
            single_rows is None
        ):  # one launch (kernels/waiters.py) up to this M, as the sampler's rule
            single_rows = half
        # Programmatic dependent launches as the sampler makes them with one rank per GPU:
        # at world size 1 only (emulated ranks share a GPU, see fused.launcher.Launcher).
        pdl = world == 1 and pdl_capable(device)
        self.fused = [
            fused.Fused(
                columns,
                world,
                r,
                self._box_for(r),
                False,
                wait_ctas or None,
                device.index,
                single_rows=single_rows,
                pdl=pdl,
            )  # fmt: skip
            for r in range(world)
        ]
        cuda = device.type == "cuda"
        self.streams = [torch.cuda.Stream(device) if cuda else None for _ in range(world)]
        if cuda:  # loads the delay kernel now, not while a rank spins (see warm)
            torch.cuda._sleep(1)

    def _box_for(self, rank: int) -> Callable[[int, int], Box]:
        def box(words: int, rows: int, capacity: int | None = None) -> Box:
            assert rows <= self.capacity, (rows, self.capacity)
            with self._making:  # every rank's copies at once, the first time
                if words not in self._boxes:
                    self._boxes[words] = self._make(words)
                return self._boxes[words][rank]

        return box

    def _make(self, words: int) -> list[Box]:
        """Every rank's copy of a mailbox of ``words`` words per rank, sharing a peer table."""
        made = [
            Box(words * self.world, self.capacity, self.device, self.timeout_s)
            for _ in range(self.world)
        ]
        table = torch.tensor(
            [b.data.data_ptr() for b in made], dtype=torch.int64, device=self.device
        )
        for b in made:
            b.peers = table
        return made

    def diverged(self) -> list[str]:
        """Where the ranks' copies disagree once no kernel runs: every use of a row writes
        the same words into every copy, and every rank advances the row's epoch alike, so
        all copies of a mailbox (data and epochs) must be equal bit for bit."""
        out = []
        for words, boxes in self._boxes.items():
            for r, b in enumerate(boxes[1:], 1):
                for what, mine, theirs in (("data", b.data, boxes[0].data),
                                           ("epoch", b.epoch, boxes[0].epoch)):  # fmt: skip
                    if not torch.equal(mine, theirs):
                        at = (mine != theirs).nonzero().flatten()[:4].tolist()
                        out.append(f"{words}-word mailbox: rank {r}'s {what} != rank 0's at {at}")
        return out

    def warm(self, call: Callable[[fused.Fused, int], Any]) -> None:
        """Loads every kernel ``call`` launches (see :meth:`_warm`): first as two launches
        per round, so that every kernel but the one-launch ones (the ``*_one``
        kernels) is loaded; then as the ranks run it, with the one-launch
        kernels held back like the waiting ones."""
        saved = [f.single_rows for f in self.fused]
        for f in self.fused:
            f.single_rows = 0
        try:
            self._warm(call)
        finally:
            for f, rows in zip(self.fused, saved, strict=True):
                f.single_rows = rows
        if any(saved):
            self._warm(call)

    def _warm(self, call: Callable[[fused.Fused, int], Any]) -> None:
        """Compiles and loads every kernel ``call`` launches, without any rank waiting
        for another: each rank's waiting kernels (and one-launch kernels, which wait) are
        held back until every rank's writers are enqueued, then launched in turn, the
        ranks' first held launches before their second ones (a round's writers then read
        unset values from the round before: the results are junk). Loading a module while
        a kernel of the same process spins waiting for it can deadlock (CUDA's lazy
        loading says so); launched in that order, each held kernel's first launch loads
        its module once the ranks' held kernels before it have met and ended. So call this
        for every operation and dtype before :meth:`run`."""
        held: list[tuple[int, int, Callable[..., Any], torch.cuda.Stream]] = []
        for r, f in enumerate(self.fused):
            for name in WAITERS:
                real = getattr(f, name)
                if name == "rest":  # junk tokens may differ between ranks: serve no row
                    real = functools.partial(_rest_of_none, real)

                def hold(*args: Any, real: Callable[..., Any] = real, r: int = r, **kw: Any) -> Any:
                    turn = sum(1 for h in held if h[1] == r)
                    stream = torch.cuda.current_stream(self.device)
                    held.append((turn, r, functools.partial(real, *args, **kw), stream))

                setattr(f, name, hold)
        try:
            self.run(call, check=False, after=held)
        finally:
            for f in self.fused:
                for name in WAITERS:
                    delattr(f, name)

    def run(
        self,
        call: Callable[[fused.Fused, int], Any],
        delay: tuple[int, int] | None = None,
        *,
        check: bool = True,
        after: list | None = None,
    ) -> list[Any]:
        """``call(fused, rank)`` for every rank, each on its own stream; ``delay``:
        ``(rank, cycles)`` puts that rank's stream to sleep first. Waits for all.
        ``after`` (:meth:`_warm`): ``(turn, rank, launch, stream)`` entries that the calls
        add, launched after them in that order.

        Without ``after``, each rank's call runs in its own thread, the ranks in phases
        that end at each waiting launch (:func:`scripts.support.phases.in_phases` says why)."""
        main = torch.cuda.current_stream(self.device)
        for stream in self.streams:
            stream.wait_stream(main)
        if after is not None:
            outs = [self._submit(call, r, delay) for r in range(self.world)]
            for _, _, go, stream in sorted(after):
                with torch.cuda.stream(stream):
                    go()
        else:
            outs = in_phases(self.fused, WAITERS, lambda r: self._submit(call, r, delay))
        for stream in self.streams:
            main.wait_stream(stream)
        torch.cuda.synchronize(self.device)
        for boxes in self._boxes.values():
            for b in boxes:
                if check:
                    b.check()
        return outs

    def _submit(
        self, call: Callable[[fused.Fused, int], Any], r: int, delay: tuple[int, int] | None
    ) -> Any:
        with torch.cuda.device(self.device), torch.cuda.stream(self.streams[r]):
            if delay is not None and delay[0] == r:
                torch.cuda._sleep(delay[1])
            return call(self.fused[r], r)


def _rest_of_none(rest: Callable[..., Any], shard: torch.Tensor, head: tuple, *args: Any) -> None:
    """:meth:`~logits_gather.sampling.fused.fused.Fused.rest` with every token set first
    (``head[-1]``), so that it loads its kernel and serves no row."""
    head[-1].fill_(0)
    rest(shard, head, *args)


__all__ = ["Box", "Ranks"]
