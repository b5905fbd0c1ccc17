"""The fused GPU path's launch sequences, one per operation (imports the Triton kernels).

Greedy, sampling and logprobs take one round, min-p two (the row maximum first), top-k two
or three writers over two rounds (:mod:`..kernels.topk`), top-p one or two rounds
(:mod:`..kernels.topp`) and the in-kernel exact fallback for the rows they leave
(:mod:`..kernels.topp_exact`). The rounds and their launches: :mod:`.rounds`. Nothing here
allocates but the outputs; no host sync.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..kernels import topk, topp, topp_exact, waiters, writers
from . import plans
from .plans import (
    FINAL_WARPS,
    REST,
    REST_PROGRAMS,
    idle_programs,
    pairs,
    pow2,
    rest_team,
    rest_teams,
    room,
    select_warps,
    xbits,
)
from .rounds import Rounds

Seeds = tuple[torch.Tensor, torch.Tensor]
"""``(seeds, positions)``: int64 ``[M]`` each, contiguous; the kernels read row ``i`` of
each at ``ptr + i``."""


class Fused(Rounds):
    """One sampler's fused operations over :class:`.rounds.Rounds`' launches (the
    constructor's arguments are its)."""

    round_two_rows = 64
    """Top-p's calls of more rows run round 2 before the in-kernel fallback. One H100,
    world size 1, V=151552, bf16 ``randn * 3`` logits, T=0.8, top_p=0.9, graph replay,
    µs at M = 1 / 4 / 16 / 64 / 256, with round 2 always: 30.6 / 34.2 / 44.0 / 85.3 /
    302.9; never: 29.0 / 31.0 / 40.7 / 80.5 / 357.1. At M=256 some rows need it, and its
    74 programs per row serve them faster than the fallback's teams of 16."""

    def greedy(self, shard: torch.Tensor, key: bool = False) -> torch.Tensor:
        """Token ids ``[M]``; with ``key``, the greedy keys (min-p's first round)."""
        bits = {"XBITS": xbits(shard.dtype), "PAIRS": pairs(shard)}
        if self.one_wanted(shard):
            out = self.empty(shard)
            self.one(waiters.greedy_one, shard, "greedy", (out,), (self.wide.c,),
                     {"KEY": key, **bits})  # fmt: skip
            return out
        mb = self.local(writers.greedy_local, shard, (), "greedy", 0, (), bits)
        out = self.empty(shard)
        c = self.wide.c
        self.final(waiters.greedy_final, shard.shape[0], mb, (out, c), {"KEY": key}, 1)
        return out

    def sample(self, shard: torch.Tensor, t: torch.Tensor, seed: Seeds) -> torch.Tensor:
        """``t`` fp32 ``[M]``, ``seed`` the seeds and positions (:data:`Seeds`)."""
        m, out = shard.shape[0], self.empty(shard)
        if self.one_wanted(shard):
            tail = (self.narrow.c,)
            self.one(waiters.sample_one, shard, "sample", (t, *seed, out), tail, {})
            return out
        mb = self.local(writers.sample_local, shard, (t, *seed), "sample", 0, (), {})
        tail = (t, out, self.narrow.c)
        self.final(waiters.sample_final, m, mb, tail, {}, 1, self.narrow)
        return out

    def sample_minp(
        self, shard: torch.Tensor, t: torch.Tensor, seed: Seeds, min_p: torch.Tensor
    ) -> torch.Tensor:
        """min-p without top-k/top-p: greedy round for ``s_max``, then the min-p round
        (``min_p`` fp32 ``[M]``)."""
        gbest = self.greedy(shard, key=True)
        out = self.empty(shard)
        if self.one_wanted(shard):
            free = (t, *seed, min_p, gbest, out)
            self.one(waiters.minp_one, shard, "sample", free, (self.narrow.c,), {})
            return out
        head = (t, *seed, min_p, gbest)
        mb = self.local(writers.minp_local, shard, head, "sample", 0, (), {})
        tail = (t, out, self.narrow.c)
        self.final(waiters.sample_final, shard.shape[0], mb, tail, {}, 1, self.narrow)
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
            self.one(waiters.logprobs_one, shard, "logprobs", free, tail, consts, npad, (n,))
            return lp, top_ids, top_lp
        mb = self.local(writers.logprobs_local, shard, (ids,), "logprobs", npad, (n,), consts)
        tail = (ids, lp, top_ids, top_lp, geo.splits, geo.c, self.columns, self.world, n)
        warps = 4 if npad else 1
        self.final(waiters.logprobs_final, m, mb, tail, {"NP": npad}, warps, geo)
        return lp, top_ids, top_lp

    def sample_topk(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: Seeds,
        k: int | torch.Tensor,
        p: torch.Tensor | None,
        min_p: torch.Tensor | None,
        *,
        plain: bool = False,
        exact: bool = True,
    ) -> torch.Tensor:
        """Top-k (``k`` 1..64, or int64 ``[M]``: rows outside 1..64 get junk tokens), then
        min-p (``min_p`` fp32 ``[M]``) and top-p (``p`` float64 or float32 ``[M]``, ``>= 1``
        off) over the exact top-k set (:mod:`..kernels.topk`). With ``plain`` (``k`` a
        tensor, no ``p``), rows with ``k`` off are sampled without top-k in the same
        launches, and rows with ``64 < k < V`` get -1, then with ``exact`` their tokens
        from top-p's in-kernel fallback (:meth:`rest`). Five launches (six with ``plain``);
        in eager calls three (each round's waiting kernel joins its last writer)."""
        per_row = isinstance(k, torch.Tensor)
        m, c, plan = shard.shape[0], self.wide.c, self.wide.topk(64 if per_row else k)
        g, kp = plan.g, plan.kp
        gbest, low = self.empty(shard), self.empty(shard, torch.int32)
        free, n = ((k,), ()) if per_row else ((), (k,))
        one = self.one_wanted(shard)  # one launch per round
        warps = plan.probe_one if one else 0
        pair = {"PAIRS": pairs(shard)}
        consts = {"G": g, "ROWK": per_row, "BITS": xbits(shard.dtype)}
        if warps:
            fn, args = topk.probe_one, (t, gbest, low, *free)
            self.one(fn, shard, "probe", args, (c,), consts | pair, g, n, warps=warps)
        else:
            probe = topk.topk_probe
            mb = self.local(probe, shard, (), "probe", g, (), {"G": g, **pair}, plan.probe)
            self.final(topk.topk_reduce, m, mb, (t, gbest, low, c, k), consts, plan.reduce)
        mb = self.box(self.words("sample_k", kp), m)
        if mb.flags is None:  # lives with its mailbox: graphs captured with it keep both
            mb.flags = torch.zeros(mb.capacity * self.wide.splits, dtype=torch.int32,
                                   device=shard.device)  # fmt: skip
        flags = mb.flags
        pv = t if p is None else p
        mpv = t if min_p is None else min_p
        filters = {"TOPP": p is not None, "MINP": min_p is not None, "PLAIN": plain}
        vocab = self.columns * self.world
        if plain:  # rows with k off sample here too
            head = (t, low, flags, k, *seed, mpv, gbest)
            consts = {"KP": kp, "MINP": filters["MINP"]}
            self.local(topk.rowk_local, shard, head, "sample_k", kp, (vocab,), consts)
        else:
            self.local(topk.topk_local, shard, (t, low, flags), "sample_k", kp, (), {"KP": kp})
        splits = self.wide.splits
        programs = idle_programs(m, splits, plans.OVERFLOW_PROGRAMS, plans.OVERFLOW_LEAST)
        out = self.empty(shard)
        over = {"KP": kp, "BITS": xbits(shard.dtype), "ROWK": per_row, "SP": pow2(splits)}
        warps = plan.final_one if one else 0
        if warps:
            head = (t, *seed, flags, pv, mpv, gbest, out, *free)
            self.one(topk.topk_one, shard, "sample_k", head, (splits, c, vocab),
                       over | filters, kp, n, programs, warps)  # fmt: skip
        else:
            self.local(topk.topk_overflow, shard, (t, *seed, flags), "sample_k", kp, (k, splits),
                         over, programs=programs)  # fmt: skip
            tail = (t, *seed, pv, mpv, gbest, out, c, k, vocab)
            consts = {"KP": kp, **filters, "ROWK": per_row, "XBITS": over["BITS"]}
            self.final(topk.topk_final, m, mb, tail, consts, plan.final)
        if plain and exact:  # rows with 64 < k < V: the cut over the whole row
            ones, done = self.rest_rows(shard)
            self.rest(shard, (t, *seed, ones, mpv, k, gbest, done, gbest, out), min_p is not None,
                      True)  # fmt: skip
        return out

    def rest_rows(self, shard: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(top_p 1.0 float64, lam DONE int32)``, ``[M]`` each, for :meth:`rest` after
        top-k: views of buffers that only grow and are never freed (graphs captured with
        them keep reading them)."""
        m = shard.shape[0]
        if not self.kept or self.kept[-1][0].shape[0] < m:
            size = max(m, 2 * self.kept[-1][0].shape[0] if self.kept else 64)
            ones = torch.ones(size, dtype=torch.float64, device=shard.device)
            done = torch.full(
                (size,), topp_exact.DONE.value, dtype=torch.int32, device=shard.device
            )
            self.kept.append((ones, done))
        ones, done = self.kept[-1]
        return ones[:m], done[:m]

    def sample_topp(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: Seeds,
        p: torch.Tensor,
        min_p: torch.Tensor | None,
        *,
        exact: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-p (``p`` float64 or float32 ``[M]``), after min-p if ``min_p`` (fp32 ``[M]``):
        ``(tokens, need)``, ``need`` (bool ``[1]``) True where the rounds left a row
        undecided. Both rounds run, then with ``exact`` the in-kernel fallback (every token
        final); without it undecided rows keep -1."""
        out, flags, second, rest_ = self.topp_rounds(shard, t, seed, p, min_p)
        second()
        if exact:
            rest_()
        return out, flags[:1]

    def topp_rounds(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: Seeds,
        p: torch.Tensor,
        min_p: torch.Tensor | None,
        k: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None], Callable[[], None]]:
        """:meth:`sample_topp`'s round 1, launched: ``(tokens, flags, second, rest)``.
        ``flags`` (bool ``[2]``): ``need``, and ``more`` (some row left to round 2, or
        ``need``; the same on every rank). ``second()`` launches round 2 and ``rest()`` the
        in-kernel exact fallback, which serves every row still -1; the tokens are final
        once ``rest()`` ran. ``self.spilled`` and ``self.topp_flags`` keep the last call's
        ``lam`` and ``flags`` (diagnostics). With ``k`` (a per-row ``top_k``, int64 ``[M]``),
        top-k applies first in the rows where it is on (never in round 2)."""
        m, slots = shard.shape[0], self.topp_slots
        gbest = self.greedy(shard, key=True)
        mp = p if min_p is None else min_p
        # flags and lam are set by nucleus_local (False, DONE), not by fill kernels.
        flags = torch.empty(2, dtype=torch.bool, device=shard.device)
        lam = self.empty(shard, torch.int32)
        kv, vocab = (t, 0) if k is None else (k, self.columns * self.world)
        head = (t, *seed, p, mp, gbest, lam, flags, kv)
        consts = {"SLOTS": slots, "MINP": min_p is not None, "ROWK": k is not None}
        mb = self.local(topp.nucleus_local, shard, head, "topp", 0, (vocab,), consts)
        out = self.empty(shard)
        thr = self.empty(shard)
        self.spilled, self.topp_flags = lam, flags
        lanes = pow2(self.narrow.c * slots)
        consts = {"SLOTS": slots, "LANES": lanes, "XBITS": xbits(shard.dtype)}
        tail = (t, *seed, p, gbest, out, flags, lam, thr, self.narrow.c, kv, vocab)
        warps = select_warps(lanes, FINAL_WARPS)
        per_row = {"ROWK": k is not None}
        self.final(topp.nucleus_final, m, mb, tail, consts | per_row, warps, self.narrow)

        def second() -> None:
            seen = self.empty(shard, torch.int32)
            head = (t, lam, seen)
            splits = self.narrow.splits
            mb = self.local(topp.again_local, shard, head, "again", 0, (splits,),
                              {"SLOTS": slots}, programs=idle_programs(m, splits))  # fmt: skip
            tail = (t, *seed, seen, thr, gbest, out, flags, self.narrow.c)
            self.final(topp.again_final, m, mb, tail, consts, warps, self.narrow)

        def exact() -> None:
            self.rest(shard, (t, *seed, p, mp, kv, gbest, lam, thr, out), min_p is not None,
                      k is not None)  # fmt: skip

        return out, flags, second, exact

    def rest_most(self, shard: torch.Tensor) -> int:
        """Programs of :meth:`rest`'s grid, at most: :data:`.plans.REST_PROGRAMS` and one
        per SM (``wait_ctas`` where ranks share a GPU)."""
        if self.sms is None:
            self.sms = torch.cuda.get_device_properties(shard.device).multi_processor_count
        return min(REST_PROGRAMS, self.sms, self.wait_ctas or self.sms)

    def rest_grid(self, shard: torch.Tensor) -> tuple[int, int]:
        """``(row slots, members per rank)`` of :meth:`rest` for ``shard``
        (:func:`.plans.rest_team`); one member in the interpreter, whose programs run one
        after another."""
        if not shard.is_cuda:
            return max(1, min(shard.shape[0], REST_PROGRAMS)), 1
        return rest_team(self.columns, shard.shape[0], self.rest_most(shard))

    def rest(self, shard: torch.Tensor, head: tuple, minp: bool, rowk: bool) -> None:
        """Launches :func:`..kernels.topp_exact.nucleus_rest` over the rows whose token is -1.
        The wider teams of smaller M (:func:`.plans.rest_teams`) each have their own
        mailbox (a few rows) and kernel variant (``MEMB``). An eager call builds and loads
        them all, launching each variant over no rows, so that a graph captured after an
        eager call at a larger M finds them, as the docs promise."""
        m = shard.shape[0]
        grid = self.rest_grid(shard)
        if not shard.is_cuda:
            self._rest(shard, head, minp, rowk, grid, m, None)
            return
        wide_rows, teams = rest_teams(self.columns, self.rest_most(shard))
        variant = (shard.dtype, minp, rowk)
        if (
            teams
            and variant not in self.rest_loaded
            and not torch.cuda.is_current_stream_capturing()
        ):
            for parts in teams:
                self._rest(shard, head, minp, rowk, (1, parts), 0, wide_rows)
            self.rest_loaded.add(variant)
        self._rest(shard, head, minp, rowk, grid, m, wide_rows if grid[1] in teams else None)

    def _rest(self, shard: torch.Tensor, head: tuple, minp: bool, rowk: bool,
              grid: tuple[int, int], m: int, capacity: int | None) -> None:  # fmt: skip
        """One launch of :meth:`rest` on ``grid`` over ``m`` rows (0: loads the variant),
        its mailbox built for ``capacity`` rows (None: the sampler's)."""
        words = grid[1] * topp_exact.WORDS.value
        mb = self.box(words, max(m, 1), capacity)
        mb.check()
        x = shard
        args = (x, x.stride(0), *head, mb.peers, mb.data, mb.epoch, mb.parity_stride)
        args += (mb.row_elems, mb.status_ptr, mb.dead, mb.timeout_us, self.rank * words)
        args += (m, self.columns, self.col0, self.columns * self.world)
        consts = {"BLOCK": REST[2], "MEMB": pow2(self.world * grid[1]), "MINP": minp,
                  "ROWK": rowk, "WORLD": self.world, "THREADS": 32 * REST[3],
                  "TRAP": self.trap}  # fmt: skip
        self.launch(topp_exact.nucleus_rest, grid, args, consts, REST[3])
