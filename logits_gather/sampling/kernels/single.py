"""One launch instead of two: greedy, sample and logprobs whose writer also waits.

Each kernel here is a ``*_local`` writer of :mod:`.writers` on the same ``(M, S)`` grid,
storing the same words into the same mailbox, followed by its final kernel's work for
the row (:mod:`.finals`), done by the row's last program to arrive on this rank. A
separate waiting kernel costs a launch: on the host about as much as the rest of an eager
greedy call, and on the device a launch gap.

Arrival protocol
----------------
Each mailbox has a private ``int32`` count per row (``arrivals``), zero at rest.

- Program ``(row, split)`` stores its words (:mod:`.ll`), crosses a CTA barrier, and one
  thread adds 1 to its row's count (``atom.acq_rel.gpu``). The program that gets
  ``S - 1`` is the row's last on this rank: it sets the count back to 0, waits for every
  rank's words as the final kernel does (:func:`.ll.wait`), reduces them, writes the
  answer and stores the row's epoch. The others end.
- The count only elects the reader: the words carry their own epoch, so it orders no
  data. It also orders the epoch: every program loaded the row's epoch before its
  arrival (release), and the reader stores it after its own (acquire), so no program of
  the call reads the next epoch. The reset races with nothing: the other ``S - 1``
  programs of the row have arrived, and the next kernel over this mailbox starts after
  this one ends (stream order), as the two-launch path relies on too.
- Both paths share mailboxes, epochs and word layouts, so calls may alternate between
  them (the sampler picks by ``M``).

Progress
--------
A reader spins inside a kernel whose other programs may not have started yet, so the
readers must never take every slot while a writer they need has none. At most ``M``
readers per rank wait at once, and only for peers' writers, which never wait; so the
one-launch form runs only while ``M`` is at most half the SMs (:func:`.policy.single_rows`),
with one rank per GPU, and outside graph capture. Above that, and where ranks share a GPU,
a round takes two launches.

Measured (one H200, world size 1, M=4, one machine start): one launch per round, bound
after its first call (:meth:`.launcher.Launcher.bind`), took an eager greedy call from
39.8 to 17.7 us of host time, sample from 35.4 to 20.3. Programs taking their rows by ticket (one
launch at any M) were measured slower than two launches: 25.0 against 20.4 us at M=256.

The filters' rounds
-------------------
The same protocol serves the writers of the filters' rounds:

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
of four (its first round is greedy's one launch). One kernel has one warp count, so the
writer and the row work share it: the host picks the writer's, capped so that the row
work's selects never get more threads than elements, and falls back to two launches
where the writer needs more threads than that allows (:func:`.geometry.one_warps`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .finals import greedy_row, logprobs_row, reduce_row, sample_row
from .logprob_writer import logprobs_write
from .overflow import overflow_write
from .topk import topk_row
from .writers import greedy_write, minp_write, probe_write, sample_write


@triton.jit
def place():
    """``(row, split)`` this program works on: its program ids."""
    return tl.program_id(0).to(tl.int64), tl.program_id(1)


@triton.jit
def last_arrival(arrivals, row):
    """Whether this program is the last of ``row``'s ``S`` programs on this rank to arrive
    (it then resets the count); every thread gets the same answer."""
    tl.debug_barrier()  # the program's stores and epoch loads come first
    count = arrivals + row
    old = tl.atomic_add(count, 1, sem="acq_rel", scope="gpu")
    last = old == tl.num_programs(1) - 1
    if last:
        tl.store(count, 0)
    return last


@triton.jit(do_not_specialize=["own", "col0"])
def greedy_one(
    x_ptr, x_stride, out_ptr, peers, box, epoch, arrivals, pstride, relems, own, N, col0,
    status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, KEY: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.greedy_local` then :func:`.finals.greedy_final` in one launch."""
    row, split = place()
    greedy_write(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                 BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        greedy_row(box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C, CAND, KEY,
                   THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def sample_one(
    x_ptr, x_stride, t_ptr, seed_ptr, out_ptr, peers, box, epoch, arrivals, pstride, relems,
    own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.sample_local` then :func:`.finals.sample_final` in one launch."""
    row, split = place()
    sample_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride, relems,
                 own, N, col0, BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                   out_ptr, C, CAND, THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["n", "own", "col0"])
def logprobs_one(
    x_ptr, x_stride, ids_ptr, lp_ptr, top_ids_ptr, top_lp_ptr, n, peers, box, epoch, arrivals,
    pstride, relems, own, N, col0, status, timeout_us, S, C, W, BLOCK: tl.constexpr,
    NP: tl.constexpr, XBITS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`.logprob_writer.logprobs_local` then :func:`.finals.logprobs_final` in one launch."""
    row, split = place()
    logprobs_write(row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n,
                   N, col0, BLOCK, NP, XBITS, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                     top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["k", "own", "col0"])
def probe_one(
    x_ptr, x_stride, t_ptr, gbest_ptr, low_ptr, k, peers, box, epoch, arrivals, pstride,
    relems, own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, G: tl.constexpr,
    ROWK: tl.constexpr, BITS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.topk_probe` then :func:`.finals.topk_reduce` in one launch."""
    row, split = place()
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
):  # fmt: skip
    """:func:`.overflow.topk_overflow` then :func:`.topk.topk_final` in one launch."""
    row, p = place()
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
):  # fmt: skip
    """:func:`.writers.minp_local` then :func:`.finals.sample_final` in one launch."""
    row, split = place()
    minp_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, mp_ptr, gbest_ptr, peers, epoch,
               pstride, relems, own, N, col0, BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                   out_ptr, C, CAND, THREADS, TRAP)  # fmt: skip


__all__ = [
    "greedy_one",
    "last_arrival",
    "logprobs_one",
    "minp_one",
    "place",
    "probe_one",
    "sample_one",
    "topk_one",
]
