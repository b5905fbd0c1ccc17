"""The waiting kernels of greedy, sampling, min-p and logprobs, and their one-launch forms.

A ``*_final`` kernel runs one CTA per row (a bounded grid loops over rows), waits in
:func:`.exchange.wait` until all ``W * S`` splits of its row carry the row's next epoch, reduces
them, writes the answer and stores the epoch. Each ``*_row`` is one row's work.

One launch per round
--------------------
A ``*_one`` kernel is a writer of :mod:`.writers` on the same ``(M, S)`` grid, storing the
same words into the same mailbox, followed by the row work, done by the row's last program
to arrive on this rank (:func:`.exchange.last_arrival`). A separate waiting kernel costs a launch:
on the host about as much as the rest of an eager greedy call.

Arrival: each mailbox has a private ``int32`` count per row, zero at rest. A program stores
its words, crosses a CTA barrier, and one thread adds 1 (``atom.acq_rel.gpu``); the one that
gets ``S - 1`` resets the count to 0, waits for every rank's words as the final kernel does,
and stores the row's epoch. The count only elects the reader (words carry their own epoch);
it also orders the epoch: every program loaded it before its arrival (release), the reader
stores it after its own (acquire). The reset races with nothing: the other programs have
arrived, and the next kernel over this mailbox starts after this one ends. Both forms share
mailboxes, epochs and layouts, so calls may alternate between them.

Progress: a reader spins inside a kernel whose other programs may not have started, so
readers must never take every slot while a writer they need has none. At most ``M``
readers per rank wait, only for peers' writers, which never wait; so the one-launch form
runs only while ``M`` is at most half the SMs (:func:`..fused.policy.single_rows`), with one
rank per GPU, outside graph capture. One kernel has one warp count: the host picks the
writer's, capped so that the row work's selects never get more threads than elements
(:func:`..fused.plans.one_warps`).

Measured (one H200, world size 1, M=4): one bound launch per round took an eager greedy
call from 39.8 to 17.7 us of host time, sample from 35.4 to 20.3. Programs taking rows by
ticket (one launch at any M) were slower than two launches: 25.0 against 20.4 us at M=256.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import exchange as ll
from .exchange import gathered, last_arrival, place, row_box
from .keys import KEY_MIN, index, value
from .noise import use_greedy
from .writers import greedy_write, logprobs_write, minp_write, sample_write


@triton.jit(do_not_specialize=["M"])
def greedy_final(
    box, epoch, pstride, relems, status, timeout_us, M, out_ptr, C,
    CAND: tl.constexpr, KEY: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """The row's greedy token, or with ``KEY`` its greedy key (min-p's first round, for
    :func:`.writers.minp_local`)."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        greedy_row(box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C, CAND, KEY,
                   THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def greedy_row(
    box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C,
    CAND: tl.constexpr, KEY: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`greedy_final`'s work for one row."""
    i = tl.arange(0, CAND)
    ep, _, g = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, i, i < C, THREADS, TRAP
    )
    best = tl.max(tl.where(i < C, g, KEY_MIN), 0)
    if KEY:
        tl.store(out_ptr + row, best)
    else:
        tl.store(out_ptr + row, index(best))
    tl.store(epoch + row, ep)


@triton.jit(do_not_specialize=["M"])
def sample_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, out_ptr, C,
    CAND: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """``C`` splits (all ranks) in the sample format (top-k's final is in :mod:`.topk`)."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, out_ptr, C,
                   CAND, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def sample_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, out_ptr, C,
    CAND: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr, F: tl.constexpr = 2,
):  # fmt: skip
    """:func:`sample_final`'s work for one row, split ``c``'s words
    at ``c * F`` (top-k's layout with ``PLAIN``)."""
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox, w0 = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, c * F, ok, THREADS, TRAP
    )
    w1 = ll.wait(rowbox, c * F + 1, ok, ep, timeout_us, status, THREADS, TRAP)
    gbest = tl.max(tl.where(ok, w0, KEY_MIN), 0)
    sbest = tl.max(tl.where(ok, w1, KEY_MIN), 0)
    t = tl.load(t_ptr + row)
    tok = tl.where(use_greedy(t, gbest), index(gbest), index(sbest))
    tl.store(out_ptr + row, tok)
    tl.store(epoch + row, ep)


@triton.jit(do_not_specialize=["M", "n"])
def logprobs_final(
    box, epoch, pstride, relems, status, timeout_us, M, ids_ptr, lp_ptr, top_ids_ptr,
    top_lp_ptr, S, C, N, W, n, CAND: tl.constexpr, NP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                     top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def logprobs_row(
    box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr, top_ids_ptr,
    top_lp_ptr, S, C, N, W, n, CAND: tl.constexpr, NP: tl.constexpr, THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):  # fmt: skip
    """:func:`logprobs_final`'s work for one row."""
    RW = 1 + S * (1 + NP)  # words per rank
    c = tl.arange(0, CAND)
    ok = c < C
    at = (c // S) * RW + 1 + (c % S) * (1 + NP)
    ep, rowbox = row_box(box, epoch, pstride, relems, row)
    tok = tl.load(ids_ptr + row)
    owner = tl.minimum(tl.maximum(tok // N, 0), W - 1).to(tl.int32)
    # One poll for every word (one memory round trip once they are in, not three in
    # turn): [CAND, J] lanes of the splits' top-n keys (NP > 0), joined with lanes whose
    # column 0 is each split's (max, sum) pair and whose lane (0, 1) is the token's logit
    # (its owner's head word).
    J: tl.constexpr = NP if NP > 1 else 2
    j = tl.arange(0, J)[None, :]
    cc = c[:, None]
    ih = tl.where(j == 0, at[:, None], owner * RW)
    mh = ((j == 0) & ok[:, None]) | ((j == 1) & (cc == 0))
    mk = ok[:, None] & (j < NP)
    keys, heads = tl.split(ll.wait(rowbox, tl.join(at[:, None] + 1 + j, ih), tl.join(mk, mh),
                                   ep, timeout_us, status, THREADS, TRAP))  # fmt: skip
    pairs = tl.sum(tl.where(j == 0, heads, 0), 1)
    tw = tl.sum(tl.sum(tl.where((j == 1) & (cc == 0), heads, 0), 1), 0)
    maxima = (pairs & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    maxima = tl.where(ok, maxima, float("-inf"))
    sums = tl.where(ok, (pairs >> 32).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    big = tl.max(maxima, 0)
    # tl.max skips NaN; a NaN logit makes its split's sum NaN, and so the result.
    total = tl.sum(tl.where(ok, sums * libdevice.exp(maxima - big), 0.0), 0)
    lse = libdevice.log(total)
    logit = tw.to(tl.int32).to(tl.float32, bitcast=True)
    tl.store(lp_ptr + row, logit - big - lse)
    if NP > 0:
        keys = tl.where(mk, keys, KEY_MIN)
        r = 0
        while r < n:  # n rounds of "take the largest key"; keys are unique
            best = tl.max(tl.max(keys, 1), 0)
            tl.store(top_ids_ptr + row * n + r, index(best))
            tl.store(top_lp_ptr + row * n + r, value(best) - big - lse)
            keys = tl.where(keys == best, KEY_MIN, keys)
            r += 1
    tl.store(epoch + row, ep)


@triton.jit(do_not_specialize=["own", "col0"])
def greedy_one(
    x_ptr, x_stride, out_ptr, peers, box, epoch, arrivals, pstride, relems, own, N, col0,
    status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, KEY: tl.constexpr, TRAP: tl.constexpr, XBITS: tl.constexpr,
    PAIRS: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`.writers.greedy_local` then :func:`.waiters.greedy_final` in one launch."""
    ll.enter(PDL)
    row, split = place()
    greedy_write(row, split, x_ptr, x_stride, peers, epoch, pstride, relems, own, N, col0,
                 BLOCK, WORLD, THREADS, XBITS, PAIRS)  # fmt: skip
    if last_arrival(arrivals, row):
        greedy_row(box, epoch, pstride, relems, status, timeout_us, row, out_ptr, C, CAND, KEY,
                   THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def sample_one(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, out_ptr, peers, box, epoch, arrivals, pstride,
    relems, own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr, WORLD: tl.constexpr,
    THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`.writers.sample_local` then :func:`.waiters.sample_final` in one launch."""
    ll.enter(PDL)
    row, split = place()
    sample_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, peers, epoch, pstride,
                 relems, own, N, col0, BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, out_ptr, C,
                   CAND, THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["n", "own", "col0"])
def logprobs_one(
    x_ptr, x_stride, ids_ptr, lp_ptr, top_ids_ptr, top_lp_ptr, n, peers, box, epoch, arrivals,
    pstride, relems, own, N, col0, status, timeout_us, S, C, W, BLOCK: tl.constexpr,
    NP: tl.constexpr, XBITS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
    CAND: tl.constexpr, TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`.writers.logprobs_local` then :func:`logprobs_final` in one launch."""
    ll.enter(PDL)
    row, split = place()
    logprobs_write(row, split, x_ptr, x_stride, ids_ptr, peers, epoch, pstride, relems, own, n,
                   N, col0, BLOCK, NP, XBITS, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        logprobs_row(box, epoch, pstride, relems, status, timeout_us, row, ids_ptr, lp_ptr,
                     top_ids_ptr, top_lp_ptr, S, C, N, W, n, CAND, NP, THREADS, TRAP)  # fmt: skip


@triton.jit(do_not_specialize=["own", "col0"])
def minp_one(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, mp_ptr, gbest_ptr, out_ptr, peers, box, epoch,
    arrivals, pstride, relems, own, N, col0, status, timeout_us, C, BLOCK: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr, CAND: tl.constexpr, TRAP: tl.constexpr,
    PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`.writers.minp_local` then :func:`.waiters.sample_final` in one launch."""
    ll.enter(PDL)
    row, split = place()
    minp_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, mp_ptr, gbest_ptr, peers,
               epoch, pstride, relems, own, N, col0, BLOCK, WORLD, THREADS)  # fmt: skip
    if last_arrival(arrivals, row):
        sample_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, out_ptr, C,
                   CAND, THREADS, TRAP)  # fmt: skip
