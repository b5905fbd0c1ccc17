"""One launch instead of two: greedy, sample and logprobs whose writer also waits.

Each kernel here is a ``*_local`` writer of :mod:`.writers` on the same ``(M, S)`` grid,
storing the same words into the same mailbox, followed by its final kernel's work for
the row (:mod:`.finals`), done by the row's last program to arrive on this rank. A
separate waiting kernel costs a launch: on the host about as much as the rest of an eager
greedy call, and on the device a launch gap.

Arrival protocol
----------------
Each mailbox has a private ``int32`` word array (``arrivals``), zero at rest: in a
kernel of ``S`` programs per row, words ``0 .. S - 1`` are the split columns' ticket
counters and word ``S + row`` is the row's arrival count (the array holds the
mailbox's words per row, at least ``S``, plus its capacity).

- A program stores its words (:mod:`.ll`), crosses a CTA barrier, and one thread adds 1
  to its row's count (``atom.acq_rel.gpu``). The program that gets ``S - 1`` is the
  row's last on this rank: it sets the count back to 0, waits for every rank's words as
  the final kernel does (:func:`.ll.wait`), reduces them, writes the answer and stores
  the row's epoch. The others end.
- The count only elects the reader: the words carry their own epoch, so it orders no
  data. It also orders the epoch: every program loaded the row's epoch before its
  arrival (release), and the reader stores it after its own (acquire), so no program of
  the call reads the next epoch. The reset races with nothing: the other ``S - 1``
  programs of the row have arrived, and the next kernel over this mailbox starts after
  this one ends (stream order), as the two-launch path relies on too.
- Both paths share mailboxes, epochs and word layouts, so calls may alternate between
  them (the sampler picks by ``M``), and ranks could even differ.

Progress
--------
A reader spins inside a kernel whose other programs may not have started yet, so the
kernel must not let readers take every slot while a writer they need has none. Two
ways, picked per call (``TICKET``):

- Work by program id (``M`` at most ``ticket_rows``): program ``(row, split)`` writes
  that split. At most ``M`` readers per rank wait at once, and only for peers' writers,
  which never wait; so this runs only while the readers of every rank on a GPU cannot
  fill it: ``M`` at most half the SMs (one rank per GPU), or half the SMs divided among
  the ranks that share the GPU (:func:`.policy.single_rows`).
- Work by ticket (any ``M``, one rank per GPU): program ``(i, s)`` first takes a
  ticket ``t`` from its split column's counter (one relaxed atomic add on word ``s``)
  and writes split ``s`` of row ``t``: each column hands out its rows in order, whatever
  order the hardware starts programs in. The program that takes a column's last ticket
  sets its counter back to 0 (every other program of the column has taken its own).
  Only a running program takes a ticket, and a writer never waits, so once every column
  of a rank has handed out rows ``0..r`` its words of those rows arrive. A reader of row
  ``r`` exists only where that holds, since all ``S`` programs of the row arrived. Take
  the rank whose columns have handed out the fewest rows (its least column): every
  reader on its GPU waits for rows that every column of every other rank has handed
  out, so each one ends, and so do its writers; so some rank always progresses,
  whatever the number of rows. This needs each rank's kernel alone on its GPU among
  these kernels: ranks that share a GPU could fill it with one rank's readers while
  another rank, which they wait for, has no program running, so sharers keep the
  program-id bound. (One counter for all columns, ticket ``t`` writing split ``t % S``
  of row ``t // S``, holds by the same argument; its ``M * S`` adds on one word cost
  more device time.)
"""

from __future__ import annotations

import triton
import triton.language as tl

from .finals import greedy_row, logprobs_row, sample_row
from .logprob_writer import logprobs_write
from .writers import greedy_write, sample_write


@triton.jit
def place(arrivals, TICKET: tl.constexpr):
    """``(row, split)`` this program works on: its program id, or with ``TICKET`` its split
    column's next row (see Progress)."""
    split = tl.program_id(1)
    if TICKET:
        t = tl.atomic_add(arrivals + split, 1, sem="relaxed", scope="gpu")
        if t == tl.num_programs(0) - 1:  # the column's last ticket: each program has one
            tl.store(arrivals + split, 0)
        return t.to(tl.int64), split
    else:
        return tl.program_id(0).to(tl.int64), split


@triton.jit
def last_arrival(arrivals, row):
    """Whether this program is the last of ``row``'s ``S`` programs on this rank to arrive
    (it then resets the count); every thread gets the same answer."""
    tl.debug_barrier()  # the program's stores and epoch loads come first
    count = arrivals + tl.num_programs(1) + row
    old = tl.atomic_add(count, 1, sem="acq_rel", scope="gpu")
    last = old == tl.num_programs(1) - 1
    if last:
        tl.store(count, 0)
    return last


@triton.jit(do_not_specialize=["own", "col0"])
def greedy_one(
    x_ptr, x_stride, out_ptr, peers, box, epoch, arrivals, pstride, relems, own, N, col0,
    status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, KEY: tl.constexpr, TRAP: tl.constexpr, TICKET: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.greedy_local` then :func:`.finals.greedy_final` in one launch."""
    row, split = place(arrivals, TICKET)
    greedy_write(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                 BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        greedy_row(box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C, CAND, KEY,
                   THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def sample_one(
    x_ptr, x_stride, t_ptr, seed_ptr, out_ptr, peers, box, epoch, arrivals, pstride, relems,
    own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr, TICKET: tl.constexpr,
):  # fmt: skip
    """:func:`.writers.sample_local` then :func:`.finals.sample_final` in one launch."""
    row, split = place(arrivals, TICKET)
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
    CAND: tl.constexpr, TRAP: tl.constexpr, TICKET: tl.constexpr,
):  # fmt: skip
    """:func:`.logprob_writer.logprobs_local` then :func:`.finals.logprobs_final` in one launch."""
    row, split = place(arrivals, TICKET)
    logprobs_write(row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n,
                   N, col0, BLOCK, NP, XBITS, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                     top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip


__all__ = ["greedy_one", "last_arrival", "logprobs_one", "place", "sample_one"]
