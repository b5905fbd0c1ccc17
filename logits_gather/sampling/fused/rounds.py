"""The fused GPU path's launch machinery (class :class:`Rounds`): geometries, mailbox sizes,
and the three kinds of launch every operation is made of.

The shard is cut into ``S = ceil(N / block)`` splits of ``block`` columns. A round is a
writer (:meth:`Rounds.local`), whose program ``(row, split)`` stores its words straight into
every rank's mailbox, and a waiting kernel (:meth:`Rounds.final`) that reduces all ranks'
words of its row (layouts: :mod:`..kernels.writers`; the exchange: :mod:`..kernels.exchange`).
In eager calls of at most ``single_rows`` rows with one rank per GPU, a round's writer and
waiting kernel are one launch (:meth:`Rounds.one`, :mod:`..kernels.waiters`). The
operations themselves are :class:`.fused.Fused`'s.

Each operation has one launch geometry, the same on every rank. The noise-heavy writers
(sampling, min-p, top-p, logprobs with ``top_n``) run :data:`.plans.NARROW` (2048
columns, 4 warps): over tp=2's 75776 columns per rank on one H200, the sampling writer took
20.8 us at M=64 against 26.2 us at 4096 x 8 (``scripts/sampling-kernel-times.py``). The
others run :data:`.plans.WIDE`: greedy and plain logprobs gain nothing from more CTAs, and
top-k's final kernel scores every split's candidate slots, so fewer splits serve it better.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .launcher import Launcher
from .plans import NARROW, TOPP_LANES, WIDE, Geometry

if TYPE_CHECKING:
    from triton.runtime.jit import JITFunction

    from .mailbox import Mailbox


class Rounds:
    """One sampler's fused launches (``columns`` per rank, ``world`` ranks). ``box(words,
    rows)``: the mailbox for rows of ``words`` words per rank; ``wait_ctas`` bounds the
    waiting kernels' grids and ``barrier`` runs before each kernel variant's first launch
    (ranks that share a GPU); ``index``: the launches' CUDA device; eager calls of at most
    ``single_rows`` rows take one launch per round (0: never); ``pdl``: programmatic
    dependent launches (:class:`.launcher.Launcher`). Every method takes shards of unit
    column stride (:func:`.plans.dense`), as the writers read them: the sampler makes a
    call's shard so once."""

    def __init__(
        self,
        columns: int,
        world: int,
        rank: int,
        box: Callable[..., Mailbox],
        trap: bool,
        wait_ctas: int | None = None,
        index: int | None = None,
        barrier: Callable[[], None] | None = None,
        single_rows: int = 0,
        pdl: bool = False,
    ) -> None:
        self.single_rows = single_rows
        # The state of Fused's operations:
        self.sms: int | None = None  # the device's, once a launch needs it
        self.rest_loaded: set[tuple] = set()  # (dtype, MINP, ROWK) whose wider teams loaded
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # rest_rows', the last current
        self.spilled: torch.Tensor | None = None  # the last top-p call's lam (diagnostics)
        self.topp_flags: torch.Tensor | None = None  # and its (need, more)
        self.single_in_graphs = False
        """Whether captured calls take one launch too. Off: in replays, whose launches cost
        the host nothing, one launch was slower for greedy, sample and top-k and at most
        1.3 us faster for min-p. One H200: greedy at M=64 8.9 us in
        one launch, 8.3 in two; logprobs with top_n=5 18.3 and 19.5. One H100, world size
        1, µs at M = 1 / 16 / 64, one launch against two: greedy 3.9 / 5.6 / 12.1 against
        3.5 / 5.1 / 11.1, sample 7.2 / 15.3 / 42.2 against 7.1 / 14.0 / 38.9, min_p 12.2 /
        21.2 / 54.9 against 12.6 / 22.5 / 54.9, top_k=50 32.8 / 39.5 / 60.6 against 31.4 /
        37.9 / 58.4."""
        self.columns, self.world, self.rank = columns, world, rank
        self.col0 = rank * columns
        self.wide = Geometry.of(columns, world, *WIDE)
        self.narrow = Geometry.of(columns, world, *NARROW)
        self.topp_slots = max(1, min(64, TOPP_LANES // self.narrow.c))
        """Top-p candidate slots per split: 55 at tp=2 and V=151552 (74 splits)."""
        self.box = box
        self.trap = trap
        self.wait_ctas = wait_ctas
        self.launch = Launcher(index, barrier, pdl)
        self._words: dict[tuple[str, int], int] = {}

    def geometry(self, op: str, room: int = 0) -> Geometry:
        """The geometry of ``op`` (``logprobs`` with ``room`` top-n slots)."""
        if op in ("sample", "topp", "again") or (op == "logprobs" and room):
            return self.narrow
        return self.wide

    def words(self, op: str, room: int = 0) -> int:
        """Words per rank and row of ``op``'s mailbox."""
        w = self._words.get((op, room))
        if w is None:
            s = self.geometry(op, room).splits
            w = {
                "greedy": s,
                "sample": 2 * s,
                "probe": (1 + room) * s,
                "sample_k": (2 + room) * s,
                "topp": (3 + self.topp_slots) * s,
                "again": (1 + self.topp_slots) * s,
            }.get(op, 1 + s * (1 + room))
            self._words[op, room] = w
        return w

    def local(
        self, fn, shard, head: tuple, op: str, room: int, tail: tuple, consts: dict,
        warps: int = 0, programs: int = 0,
    ) -> Any:  # fmt: skip
        """Launches a writer into ``op``'s mailbox (``room`` slots) on ``(M, programs)``
        (default: one program per split); returns the mailbox."""
        geo = self.geometry(op, room)
        words = self.words(op, room)
        mb = self.box(words, shard.shape[0])
        x = shard
        args = (x, x.stride(0), *head, mb.peers, mb.epoch, mb.parity_stride, mb.row_elems)
        args += (self.rank * words, *tail, self.columns, self.col0)
        warps = warps or geo.warps
        consts = dict(consts, BLOCK=geo.block, WORLD=self.world, THREADS=32 * warps)
        self.launch(fn, (shard.shape[0], programs or geo.splits), args, consts, warps)
        return mb

    def final(self, fn, m: int, mb, tail: tuple, consts: dict, warps: int, geo=None) -> None:
        mb.check()
        args = (mb.data, mb.epoch, mb.parity_stride, mb.row_elems, mb.status_ptr, mb.timeout_us)
        cand = (geo or self.wide).cand
        consts = dict(consts, CAND=cand, THREADS=32 * warps, TRAP=self.trap)
        grid = m if self.wait_ctas is None else min(m, self.wait_ctas)
        self.launch(fn, (grid, 1), (*args, m, *tail), consts, warps)

    def empty(self, shard: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.empty(shard.shape[0], dtype=dtype, device=shard.device)

    def one_wanted(self, shard: torch.Tensor) -> bool:
        """Whether a round on ``shard`` takes one launch: at most ``single_rows`` rows, and
        not under graph capture unless ``single_in_graphs``."""
        if shard.shape[0] > self.single_rows:
            return False
        if self.single_in_graphs or not shard.is_cuda:  # not shard.is_cuda: the interpreter
            return True
        return not torch.cuda.is_current_stream_capturing()

    def one(
        self, fn: JITFunction, shard: torch.Tensor, op: str, free: tuple, tail: tuple, consts: dict,
        room: int = 0, n: tuple = (), programs: int = 0, warps: int = 0,
    ) -> None:  # fmt: skip
        """Launches ``op``'s one-launch kernel ``fn``: arguments ``(x, x_stride, *free, *n,
        mailbox..., *tail)``, ``free`` the call's tensors, ``n`` its unspecialised ints; grid
        ``(M, programs)`` (default: one per split). After a specialisation's first launch
        the launch is bound (:meth:`.launcher.Launcher.bind`), kept per mailbox under what
        Triton specialises in the free arguments."""
        mb = self.box(self.words(op, room), shard.shape[0])
        mb.check()
        x = shard
        xp, xs = x.data_ptr(), x.stride(0)
        args = [xp, xs]
        key = [id(fn), x.dtype, xp & 15, xs, programs, warps, *consts.values()]
        for a in free:
            p = a.data_ptr()
            args.append(p)
            key += (p & 15, a.dtype)
        key = tuple(key)
        plan = mb.plans.get(key)
        if plan is not None and self.launch.fast(plan, x.shape[0], (*args, *n)):
            return
        geo = self.geometry(op, room)
        own = self.rank * self.words(op, room)
        args = (x, xs, *free, *n, mb.peers, mb.data, mb.epoch, mb.arrivals)
        args += (mb.parity_stride, mb.row_elems, own, self.columns, self.col0, mb.status_ptr)
        args += (mb.timeout_us, *tail)
        warps, programs = warps or geo.warps, programs or geo.splits
        consts = dict(consts, BLOCK=geo.block, WORLD=self.world, THREADS=32 * warps,
                      CAND=geo.cand, TRAP=self.trap)  # fmt: skip
        self.launch(fn, (x.shape[0], programs), args, consts, warps)
        plan = self.launch.bind(fn, programs, args, consts, warps, 2 + len(free) + len(n))
        if plan is not None:
            mb.plans[key] = plan
