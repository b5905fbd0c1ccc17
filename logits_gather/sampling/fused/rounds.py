"""The fused GPU path: two Triton kernels per round, the exchange inside them.

The shard is cut into ``S = ceil(N / block)`` splits of ``block`` columns. The
local kernel's program ``(row, split)`` stores its words straight into every
rank's mailbox; the final kernel waits for all ranks' words of its row and
reduces them (word layouts: :mod:`.writers`; the exchange: :mod:`.ll`). min-p alone
takes two rounds (the row maximum first). The filters' longer sequences (top-k with
min-p and top-p; top-p) are in :mod:`.filtered`. In eager calls of at most
``single_rows`` rows with one rank per GPU, a round's writer and waiting kernel are one
launch instead (:mod:`.single`). Nothing here allocates but the
outputs; no host sync.

Each operation has one launch geometry (the same on every rank; its mailbox layout
follows from it). The noise-heavy writers (sampling, min-p, the filter path's
scores, logprobs with ``top_n``) run :data:`NARROW` (2048 columns, 4 warps): over
tp=2's per-rank 75776 columns on one H200, the sampling local kernel took 20.8 us at
M=64 against 26.2 us at 4096 x 8 (``scripts/sampling-kernel-times.py``). The others run
:data:`WIDE`: greedy and plain logprobs gain nothing from more CTAs, and top-k's
final kernel scores every split's candidate slots, so fewer splits serve it better.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..kernels import finals, keys, logprob_writer, single, writers
from .geometry import NARROW, NUCLEUS_LANES, WIDE, Geometry, room, xbits
from .launcher import Launcher


class Rounds:
    """Launch geometries of one sampler (``columns`` per rank, ``world`` ranks) and its
    launches. ``box(words, rows)`` returns the mailbox for rows of ``words`` words per
    rank (collective when it has to build one); ``wait_ctas`` bounds the waiting
    kernels' grids (ranks that share a GPU); ``index`` is the CUDA device the launches go
    to; ``barrier`` (ranks that share a GPU) runs before each kernel variant's first
    launch (:class:`.Launcher`); eager calls of at most ``single_rows`` rows take one
    launch per round (:mod:`.single`; 0: never)."""

    def __init__(
        self,
        columns: int,
        world: int,
        rank: int,
        box: Any,
        trap: bool,
        wait_ctas: int | None = None,
        index: int | None = None,
        barrier: Callable[[], None] | None = None,
        single_rows: int = 0,
    ) -> None:
        self.single_rows = single_rows
        self.single_in_graphs = False
        """Whether captured calls take one launch too. Off: on one H200 the device times
        are within about 1 us either way (greedy at M=64 8.9 us in one launch, 8.3 in two;
        logprobs with top_n=5 18.3 and 19.5), and in a replay the launches cost the host
        nothing."""
        self.columns, self.world, self.rank = columns, world, rank
        self.col0 = rank * columns
        self.wide = Geometry.of(columns, world, *WIDE)
        self.narrow = Geometry.of(columns, world, *NARROW)
        self.nucleus_slots = max(1, min(64, NUCLEUS_LANES // self.narrow.c))
        """Top-p candidate slots per split: 55 at tp=2 and V=151552 (74 splits)."""
        self.box = box
        self.trap = trap
        self.wait_ctas = wait_ctas
        self.launch = Launcher(index, barrier)
        self._words: dict[tuple[str, int], int] = {}
        self.spilled: torch.Tensor | None = None  # the last top-p call's lam (diagnostics)
        self.topp_flags: torch.Tensor | None = None  # and its (need, more)

    def geometry(self, op: str, room: int = 0) -> Geometry:
        """The geometry of ``op`` (``logprobs`` with ``room`` top-n slots)."""
        if op in ("sample", "scores", "nucleus", "again") or (op == "logprobs" and room):
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
                "nucleus": (3 + self.nucleus_slots) * s,
                "again": (1 + self.nucleus_slots) * s,
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
        x = shard if shard.stride(1) == 1 else shard.contiguous()
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
        self, fn: Any, shard: torch.Tensor, op: str, free: tuple, tail: tuple, consts: dict,
        room: int = 0, n: tuple = (), programs: int = 0, warps: int = 0,
    ) -> None:  # fmt: skip
        """Launches ``op``'s one-launch kernel ``fn`` (:mod:`.single`): arguments ``(x,
        x_stride, *free, *n, mailbox..., *tail)``, ``free`` the call's tensors, ``n`` its
        unspecialised ints; grid ``(M, programs)`` (default: one program per split) of
        ``warps`` warps (default: the geometry's). After the first launch of a
        specialisation the launch is bound (:meth:`.Launcher.bind`): one call of Triton's C
        launcher with the call's few addresses. Bound launches are kept per mailbox (a new
        mailbox has new addresses), under what Triton specialises in the free arguments."""
        mb = self.box(self.words(op, room), shard.shape[0])
        mb.check()
        x = shard if shard.stride(1) == 1 else shard.contiguous()
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

    def greedy(self, shard: torch.Tensor, key: bool = False) -> torch.Tensor:
        """Token ids ``[M]``; with ``key``, the greedy keys (min-p's first round)."""
        if self.one_wanted(shard):
            out = self.empty(shard)
            self.one(single.greedy_one, shard, "greedy", (out,), (self.wide.c,), {"KEY": key})
            return out
        mb = self.local(writers.greedy_local, shard, (), "greedy", 0, (), {})
        out = self.empty(shard)
        c = self.wide.c
        self.final(finals.greedy_final, shard.shape[0], mb, (out, c), {"KEY": key}, 1)
        return out

    def sample(self, shard: torch.Tensor, t: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
        """``t`` fp32 ``[M]``, ``seed`` int64 ``[M, 2]`` (seed, position rows)."""
        m, out = shard.shape[0], self.empty(shard)
        if self.one_wanted(shard):
            tail = (self.narrow.c,)
            self.one(single.sample_one, shard, "sample", (t, seed, out), tail, {})
            return out
        mb = self.local(writers.sample_local, shard, (t, seed), "sample", 0, (), {})
        tail = (t, seed, out, self.narrow.c)
        self.final(finals.sample_final, m, mb, tail, {}, 1, self.narrow)
        return out

    def scores(
        self, shard: torch.Tensor, t: torch.Tensor, seed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(s, g)`` fp32 ``[M, N]`` for the filter path, in one kernel, in the fused
        kernels' arithmetic (``seed``: int64 ``[M, 2]`` seed, position rows)."""
        m, geo = shard.shape[0], self.geometry("scores")
        x = shard if shard.stride(1) == 1 else shard.contiguous()
        s = torch.empty(m, self.columns, dtype=torch.float32, device=shard.device)
        g = torch.empty_like(s)
        self.launch(
            keys.scores_kernel,
            (m, geo.splits),
            (x, x.stride(0), t, seed, s, g, self.columns, self.col0),
            {"BLOCK": geo.block},
            geo.warps,
        )
        return s, g

    def sample_minp(
        self, shard: torch.Tensor, t: torch.Tensor, seed: torch.Tensor, min_p: torch.Tensor
    ) -> torch.Tensor:
        """min-p without top-k/top-p: greedy round for ``s_max``, then the min-p round
        (``min_p`` fp32 ``[M]``)."""
        gbest = self.greedy(shard, key=True)
        out = self.empty(shard)
        if self.one_wanted(shard):
            free = (t, seed, min_p, gbest, out)
            self.one(single.minp_one, shard, "sample", free, (self.narrow.c,), {})
            return out
        head = (t, seed, min_p, gbest)
        mb = self.local(writers.minp_local, shard, head, "sample", 0, (), {})
        tail = (t, seed, out, self.narrow.c)
        self.final(finals.sample_final, shard.shape[0], mb, tail, {}, 1, self.narrow)
        return out

    def logprobs(
        self, shard: torch.Tensor, ids: torch.Tensor, n: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = shard.shape[0]
        npad = room(n) if n else 0
        geo = self.geometry("logprobs", npad)
        consts = {"NP": npad, "XBITS": xbits(shard.dtype)}
        lp = self.empty(shard, torch.float32)
        top_ids = torch.empty(m, n, dtype=torch.int64, device=shard.device)
        top_lp = torch.empty(m, n, dtype=torch.float32, device=shard.device)
        if self.one_wanted(shard):
            free = (ids, lp, top_ids, top_lp)
            tail = (geo.splits, geo.c, self.world)
            self.one(single.logprobs_one, shard, "logprobs", free, tail, consts, npad, (n,))
            return lp, top_ids, top_lp
        mb = self.local(
            logprob_writer.logprobs_local, shard, (ids,), "logprobs", npad, (n,), consts
        )
        tail = (ids, lp, top_ids, top_lp, geo.splits, geo.c, self.columns, self.world, n)
        warps = 4 if npad else 1
        self.final(finals.logprobs_final, m, mb, tail, {"NP": npad}, warps, geo)
        return lp, top_ids, top_lp


__all__ = ["Rounds"]
