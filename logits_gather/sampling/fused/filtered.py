"""The fused launch sequences of the filters: top-k (with min-p and top-p over the
exact top-k set, :mod:`.topk`) and top-p without top-k (:mod:`.nucleus`,
:mod:`.spill`). Each is several rounds of writers and waiting kernels on one
:class:`.filtered.Fused`'s geometries and mailboxes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..exact.filters import MAX_CANDIDATES
from ..kernels import finals, nucleus, overflow, rowk, single, spill, topk, writers
from . import geometry
from .geometry import FINAL_WARPS, idle_programs, pow2, select_warps, xbits
from .rounds import Rounds


class Fused(Rounds):
    """A sampler's fused launches: :class:`.rounds.Rounds`' single-round operations, and
    the filters' sequences of rounds."""

    def sample_topk(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: torch.Tensor,
        k: int | torch.Tensor,
        p: torch.Tensor | None,
        min_p: torch.Tensor | None,
        need: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Top-k (``k`` 1..64, or int64 ``[M]``: rows outside 1..64 get junk tokens), then
        min-p (``min_p`` fp32 ``[M]``) and top-p (``p`` float64 or float32 ``[M]``, rows ``>= 1``
        off) over the exact top-k set (:mod:`.topk`). With ``need`` (bool ``[1]``; ``k`` a
        tensor, no ``p``), rows whose ``k`` is off (0 or ``>= V``) are sampled without top-k
        (after min-p) in the same launches, and ``need`` says whether a row has ``64 < k < V``
        (its token is junk; :mod:`.rowk`).

        Round 1: the largest x of G column groups per split (G * c >= k) bound the
        row's k-th from below; round 2: each split sends every element at or above it,
        or (rare, a second writer) its k largest. Five launches; in eager calls three
        (:mod:`.single`: each round's waiting kernel joins its last writer)."""
        per_row = isinstance(k, torch.Tensor)
        m, c, plan = shard.shape[0], self.wide.c, self.wide.topk(64 if per_row else k)
        g, kp = plan.g, plan.kp
        gbest, low = self.empty(shard), self.empty(shard, torch.int32)
        free, n = ((k,), ()) if per_row else ((), (k,))
        one = self.one_wanted(shard)  # one launch per round (:mod:`.single`)
        warps = plan.probe_one if one else 0
        consts = {"G": g, "ROWK": per_row, "BITS": xbits(shard.dtype)}
        if warps:
            fn = single.probe_one
            self.one(fn, shard, "probe", (t, gbest, low, *free), (c,), consts, g, n, warps=warps)
        else:
            mb = self.local(writers.topk_probe, shard, (), "probe", g, (), {"G": g}, plan.probe)
            self.final(finals.topk_reduce, m, mb, (t, gbest, low, c, k), consts, plan.reduce)
        mb = self.box(self.words("sample_k", kp), m)
        if mb.flags is None:  # lives with its mailbox: graphs captured with it keep both
            mb.flags = torch.zeros(mb.capacity * self.wide.splits, dtype=torch.int32,
                                   device=shard.device)  # fmt: skip
        flags = mb.flags
        pv = t if p is None else p
        mpv = t if min_p is None else min_p
        filters = {"TOPP": p is not None, "MINP": min_p is not None, "PLAIN": need is not None}
        vocab = self.columns * self.world
        if need is not None:  # rows with k off sample here too (:mod:`.rowk`)
            head = (t, low, flags, k, seed, mpv, gbest, need)
            consts = {"KP": kp, "MINP": filters["MINP"], "KMAX": MAX_CANDIDATES}
            self.local(rowk.rowk_local, shard, head, "sample_k", kp, (vocab,), consts)
        else:
            self.local(topk.topk_local, shard, (t, low, flags), "sample_k", kp, (), {"KP": kp})
        splits = self.wide.splits
        programs = idle_programs(m, splits, geometry.OVERFLOW_PROGRAMS, geometry.OVERFLOW_LEAST)
        out = self.empty(shard)
        over = {"KP": kp, "BITS": xbits(shard.dtype), "ROWK": per_row, "SP": pow2(splits)}
        warps = plan.final_one if one else 0
        if warps:
            head = (t, seed, flags, pv, mpv, gbest, out, *free)
            self.one(single.topk_one, shard, "sample_k", head, (splits, c, vocab),
                       over | filters, kp, n, programs, warps)  # fmt: skip
            return out
        self.local(overflow.topk_overflow, shard, (t, seed, flags), "sample_k", kp, (k, splits),
                     over, programs=programs)  # fmt: skip
        tail = (t, seed, pv, mpv, gbest, out, c, k, vocab)
        consts = {"KP": kp, **filters, "ROWK": per_row, "XBITS": over["BITS"]}
        self.final(topk.topk_final, m, mb, tail, consts, plan.final)
        return out

    def sample_topp(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: torch.Tensor,
        p: torch.Tensor,
        min_p: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-p (``p`` float64 or float32 ``[M]``), after min-p if ``min_p`` (fp32 ``[M]``):
        ``(tokens, need)``, tokens -1 where neither round could decide the nucleus and
        then ``need`` (bool ``[1]``) True (:mod:`.nucleus`, :mod:`.spill`). The rows
        round 1 left to round 2 are those whose ``self.spilled`` is not DONE. Both rounds
        always run; :func:`topp_rounds` lets the caller skip round 2."""
        out, flags, second = self.topp_rounds(shard, t, seed, p, min_p)
        second()
        return out, flags[:1]

    def topp_rounds(
        self,
        shard: torch.Tensor,
        t: torch.Tensor,
        seed: torch.Tensor,
        p: torch.Tensor,
        min_p: torch.Tensor | None,
        k: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None]]:
        """:func:`sample_topp`'s round 1, launched: ``(tokens, flags, second)``. ``flags``
        (bool ``[2]``) holds ``need`` and ``more``: some row is left to round 2 or ``need``
        is set (every rank computes the same ``more``, so all may skip round 2 alike).
        ``second()`` launches round 2; the tokens are final once it ran or ``more`` is
        False. ``self.topp_flags`` is the last call's ``flags`` (diagnostics). With ``k``
        (a per-row ``top_k``, int64 ``[M]``, values >= 0), top-k applies before top-p in
        the rows where it is on (:mod:`.rowk`; such rows never go to round 2)."""
        m, slots = shard.shape[0], self.nucleus_slots
        gbest = self.greedy(shard, key=True)
        mp = p if min_p is None else min_p
        # flags and lam are set by nucleus_local (False, DONE), not by fill kernels. lam starts
        # DONE there: a harness that runs writers before the waiting kernels before them
        # (tests.emulated's warm) then has every rank skip every row alike in round 2.
        flags = torch.empty(2, dtype=torch.bool, device=shard.device)
        lam = self.empty(shard, torch.int32)
        kv, vocab = (t, 0) if k is None else (k, self.columns * self.world)
        head = (t, seed, p, mp, gbest, lam, flags, kv)
        consts = {"SLOTS": slots, "MINP": min_p is not None, "ROWK": k is not None}
        mb = self.local(nucleus.nucleus_local, shard, head, "nucleus", 0, (vocab,), consts)
        out = self.empty(shard)
        thr = self.empty(shard)
        self.spilled, self.topp_flags = lam, flags
        lanes = pow2(self.narrow.c * slots)
        consts = {"SLOTS": slots, "LANES": lanes, "XBITS": xbits(shard.dtype)}
        tail = (t, seed, p, gbest, out, flags, lam, thr, self.narrow.c, kv, vocab)
        warps = select_warps(lanes, FINAL_WARPS)
        per_row = {"ROWK": k is not None}
        self.final(nucleus.nucleus_final, m, mb, tail, consts | per_row, warps, self.narrow)

        def second() -> None:
            seen = self.empty(shard, torch.int32)
            head = (t, lam, seen)
            splits = self.narrow.splits
            mb = self.local(spill.again_local, shard, head, "again", 0, (splits,),
                              {"SLOTS": slots}, programs=idle_programs(m, splits))  # fmt: skip
            tail = (t, seed, seen, thr, gbest, out, flags, self.narrow.c)
            self.final(spill.again_final, m, mb, tail, consts, warps, self.narrow)

        return out, flags, second


__all__ = ["Fused"]
