"""One launch instead of two for the filters' rounds (imported lazily: needs Triton).

The same arrival protocol as :mod:`.single` (its docstring has the protocol and the
progress argument), applied to the writers of the filters' rounds:

- :func:`probe_one`: top-k's round 1, :func:`.writers.topk_probe` then
  :func:`.finals.topk_reduce`'s row work;
- :func:`topk_one`: top-k's round 2 after :func:`.topk.topk_local`,
  :func:`.overflow.topk_overflow` then :func:`.topk.topk_final`'s row work. Its grid is the
  overflow writer's ``(M, P)``: the row's last of its ``P`` programs reads the row. The
  words it waits for come from every rank's ``topk_local`` (an earlier launch) and
  overflow programs, none of which waits;
- :func:`minp_one`: min-p's second round, :func:`.writers.minp_local` then
  :func:`.finals.sample_final`'s row work.

So an eager top-k call is three launches instead of five, and min-p alone two instead
of four (its first round is greedy's one launch), at any M where each rank has a GPU
of its own and up to ``single_rows`` rows where ranks share one (:mod:`.single`,
Progress; the programs take work by ticket with ``TICKET``).

Warps: one kernel has one warp count, so the writer and the row work share it. The host
picks the writer's, capped so that the row work's selects never get more threads than
elements, and falls back to two launches where the writer needs more threads than
that allows (:func:`.geometry.one_warps`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .finals import reduce_row, sample_row
from .overflow import overflow_write
from .single import last_arrival, place
from .topk import topk_row
from .writers import minp_write, probe_write


@triton.jit(do_not_specialize=["k", "own", "col0"])
def probe_one(
    x_ptr, x_stride, t_ptr, gbest_ptr, low_ptr, k, peers, box, epoch, arrivals, pstride,
    relems, own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, G: tl.constexpr,
    ROWK: tl.constexpr, BITS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, TRAP: tl.constexpr, TICKET: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.topk_probe` then :func:`.finals.topk_reduce` in one launch."""
    row, split = place(arrivals, TICKET)
    probe_write(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0, BLOCK,
                G, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        reduce_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, gbest_ptr,
                   low_ptr, C, k, CAND, G, ROWK, BITS, THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["k", "own", "col0", "V"])
def topk_one(
    x_ptr, x_stride, t_ptr, seed_ptr, flags, p_ptr, mp_ptr, gbest_ptr, out_ptr, k, peers,
    box, epoch, arrivals, pstride, relems, own, N, col0, status, timeout_us, S, C, V,
    BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    SP: tl.constexpr, TOPP: tl.constexpr, MINP: tl.constexpr, PLAIN: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr,
    TICKET: tl.constexpr,
):  # fmt: skip
    """:func:`.overflow.topk_overflow` then :func:`.topk.topk_final` in one launch."""
    row, p = place(arrivals, TICKET)
    overflow_write(row, p, x_ptr, x_stride, t_ptr, seed_ptr, flags, peers, epoch, pstride,
                   relems, own, k, S, N, col0, BLOCK, KP, BITS, ROWK, SP, WORLD,
                   THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        topk_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, p_ptr,
                 mp_ptr, gbest_ptr, out_ptr, C, k, V, CAND, KP, TOPP, MINP, ROWK, BITS,
                 THREADS, TRAP, PLAIN)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def minp_one(
    x_ptr, x_stride, t_ptr, seed_ptr, mp_ptr, gbest_ptr, out_ptr, peers, box, epoch,
    arrivals, pstride, relems, own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr,
    TICKET: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.minp_local` then :func:`.finals.sample_final` in one launch."""
    row, split = place(arrivals, TICKET)
    minp_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, mp_ptr, gbest_ptr, peers, epoch,
               pstride, relems, own, N, col0, BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                   out_ptr, C, CAND, THREADS, TRAP)  # fmt: skip


__all__ = ["minp_one", "probe_one", "topk_one"]
