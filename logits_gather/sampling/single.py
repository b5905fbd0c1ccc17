"""One launch instead of two: greedy, sample and logprobs whose writer also waits.

Each kernel here is a ``*_local`` writer of :mod:`.kernels` on the same ``(M, S)`` grid,
storing the same words into the same mailbox, followed by its final kernel's work for
the row (:mod:`.finals`), done by the row's last program to arrive on this rank. A
separate waiting kernel costs a launch: on the host about as much as the rest of an eager
greedy call, and on the device a launch gap.

Arrival protocol
----------------
Each mailbox has a private ``int32 [capacity]`` arrival count per row, zero at rest.

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

Progress: a reader spins inside a kernel whose other programs may not have started yet,
so it relies on co-residency, unlike the separate waiting kernel. At most ``M`` readers
per rank wait at once (one per row, each after its own rank's programs of that row
ended), and they wait only for peers' writers, which never wait. So this kernel is used
only while the readers of every rank on a GPU cannot fill it: ``M`` at most half the
SMs (one rank per GPU), or half the SMs divided among the ranks that share the GPU
(:func:`.fastpath.single_rows`). The writers then always find room, on every GPU.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .finals import greedy_row, logprobs_row, sample_row
from .kernels import greedy_write, sample_write
from .logprob_writer import logprobs_write


@triton.jit
def last_arrival(arrivals, row):
    """Whether this program is the last of ``row``'s ``S`` programs on this rank to arrive
    (it then resets the count); every thread gets the same answer."""
    tl.debug_barrier()  # the program's stores and epoch loads come first
    old = tl.atomic_add(arrivals + row, 1, sem="acq_rel", scope="gpu")
    last = old == tl.num_programs(1) - 1
    if last:
        tl.store(arrivals + row, 0)
    return last


@triton.jit(do_not_specialize=["own", "col0"])
def greedy_one(
    x_ptr, x_stride, out_ptr, peers, box, epoch, arrivals, pstride, relems, own, N, col0,
    status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, KEY: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`.kernels.greedy_local` then :func:`.finals.greedy_final` in one launch."""
    greedy_write(x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0, BLOCK, WORLD,
                 THREADS)  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    if last_arrival(arrivals, row):
        greedy_row(box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C, CAND, KEY,
                   THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def sample_one(
    x_ptr, x_stride, t_ptr, seed_ptr, out_ptr, peers, box, epoch, arrivals, pstride, relems,
    own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`.kernels.sample_local` then :func:`.finals.sample_final` in one launch."""
    sample_write(x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride, relems, own, N, col0,
                 BLOCK, WORLD, THREADS)  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
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
    logprobs_write(x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n, N, col0,
                   BLOCK, NP, XBITS, WORLD, THREADS)  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    if last_arrival(arrivals, row):
        logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                     top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip


__all__ = ["greedy_one", "last_arrival", "logprobs_one", "sample_one"]
