"""Top-p's second round: the rows whose nucleus spilled past round 1's candidates
(imported lazily: needs Triton).

Round 1 (:mod:`.nucleus`) decides a row only when its candidates above ``B`` (the
largest ``s`` any split left out) carry ``thr``; one split whose top elements are
dense raises ``B`` for the whole row. On ``randn * 3`` logits at T=0.8 that left
about one row in 64 to the exact torch-ops fallback, which takes milliseconds.
For such a row round 1 still knows a level ``lam`` with ``tau >= lam``: the largest
level at which the candidates' own mass reaches ``thr`` (a lower bound on the
row's mass there). So round 2 gathers every kept element at or above ``lam``:

- :func:`again_local`, program ``(row, p)`` of ``(M, P)`` (``P <= S``,
  :func:`.geometry.idle_programs`; a program serves splits ``p, p + P, ..`` in
  turn): rows whose ``lam`` is DONE do
  nothing at all (no words, no epoch: every rank skips the same rows, as every rank
  computed the same ``lam``). Otherwise, per split, ``[count, SLOTS candidate keys key(s, j)]``:
  every element with ``ordered32(s) >= lam`` when at most ``SLOTS`` qualify, else only
  the count. Elements at or above ``lam`` are kept by min-p (``lam`` is the level of
  a kept candidate, and min-p keeps an upper set).
- :func:`again_final` skips the same rows: it reads the ``lam`` the writers saw, which
  split 0 stores. In stream order that is round 1's ``lam``. A test harness that holds
  waiting kernels back until every writer ran (``tests.emulated``'s warm) has the
  writers read ``lam`` before round 1 wrote it: it starts DONE on every rank, so
  every rank skips every row alike and no kernel waits for words nobody writes.
  When no split overflowed it has every
  element at or above ``lam``, hence all of the nucleus: ``tau`` by bisection from
  ``lam`` (whose mass reaches ``thr``) and the best Gumbel score at or above it.
  Else the token stays -1 and ``need`` is set: the caller's exact fallback
  (:mod:`.fallback`).

The sampler's top-p calls launch both kernels only when round 1 raised ``more`` (some
row left to this round, :mod:`.fallback`); with a per-row ``top_k`` (and in
:func:`.filtered.sample_topp`) they run on every call, and when round 1 decided
every row they exit at once. ``lam`` starts DONE: :func:`.nucleus.nucleus_local` sets
it so for every row.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .finals import gathered
from .keys import KEY_MIN, divisor, index, key, ordered32, scale, value
from .masses import decode_keys, mass_q, score_keys, tau_level
from .nucleus import DONE
from .writers import load_at, row_target


@triton.jit(do_not_specialize=["own", "col0"])
def again_local(
    x_ptr, x_stride, t_ptr, lam_ptr, seen_ptr, peers, epoch, pstride, relems, own, S, N, col0,
    BLOCK: tl.constexpr, SLOTS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Program ``(row, p)`` of ``(M, P)`` serves the row's splits ``p, p + P, ..`` (``S``
    of them) in turn: the launch costs little when no row needs it (every top-p call)."""
    row = tl.program_id(0).to(tl.int64)
    lam = tl.load(lam_ptr + row)
    if tl.program_id(1) == 0:
        tl.store(seen_ptr + row, lam)  # what the writers saw, for the final kernel
    if lam != DONE:
        ep, off = row_target(epoch, pstride, relems, row)
        t = tl.load(t_ptr + row)
        split = tl.program_id(1)
        while split < S:
            _again_split(x_ptr, x_stride, t, lam, peers, off, ep, own, N, col0, row, split,
                         BLOCK, SLOTS, WORLD, THREADS)  # fmt: skip
            split += tl.num_programs(1)


@triton.jit
def _again_split(
    x_ptr, x_stride, t, lam, peers, off, ep, own, N, col0, row, split, BLOCK: tl.constexpr,
    SLOTS: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    s = scale(x, divisor(t))
    sel = mask & (ordered32(s) >= lam)
    slot = tl.cumsum(sel.to(tl.int32), 0) - 1
    count = tl.sum(sel.to(tl.int32), 0)
    fits = count <= SLOTS
    base = own + split * (1 + SLOTS)
    ll.put_few(peers, off, base, count.to(tl.int64), 0, ep, 1, WORLD, THREADS)
    ll.put(peers, off, base + 1 + slot, key(s, gidx), sel & fits, ep, WORLD)
    j = tl.arange(0, 64)
    empty = ((j >= count) | ~fits) & (j < SLOTS)
    ll.put(peers, off, base + 1 + j, tl.full([64], KEY_MIN, tl.int64), empty, ep, WORLD)


@triton.jit(do_not_specialize=["M"])
def again_final(
    box, epoch, pstride, relems, status, timeout_us, M, t_ptr, seed_ptr, seen_ptr, thr_ptr,
    gbest_ptr, out_ptr, need_ptr, C, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """The token of every row round 1 left to this round; -1 and ``need`` set where a
    split had more than ``SLOTS`` elements at or above ``lam``."""
    row = tl.program_id(0).to(tl.int64)
    while row < M:  # a while loop: the interpreter cannot range over program ids
        lam = tl.load(seen_ptr + row)
        if lam != DONE:
            _again_row(box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr,
                       thr_ptr, gbest_ptr, out_ptr, need_ptr, C, CAND, SLOTS, LANES, XBITS,
                       THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _again_row(
    box, epoch, pstride, relems, status, timeout_us, row, t_ptr, seed_ptr, thr_ptr,
    gbest_ptr, out_ptr, need_ptr, C, CAND: tl.constexpr, SLOTS: tl.constexpr,
    LANES: tl.constexpr, XBITS: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    F: tl.constexpr = 1 + SLOTS
    c = tl.arange(0, CAND)
    ok = c < C
    ep, rowbox, count = gathered(
        box, epoch, pstride, relems, status, timeout_us, row, c * F, ok, THREADS, TRAP
    )
    e = tl.arange(0, LANES)  # candidate e: split e // SLOTS, slot e % SLOTS
    on = (e // SLOTS) < C
    cand = ll.wait(rowbox, (e // SLOTS) * F + 1 + e % SLOTS, on, ep, timeout_us, status,
                   THREADS, TRAP)  # fmt: skip
    if tl.max(tl.where(ok, count, 0), 0) <= SLOTS:
        valid = on & (cand != KEY_MIN)
        t = tl.load(t_ptr + row)
        s, h, u, _ = decode_keys(cand, t, valid, XBITS)
        smax = scale(value(tl.load(gbest_ptr + row)), divisor(t))
        q = tl.where(valid, mass_q(s, smax), 0)
        # Every element at or above lam is here, and their mass reaches thr.
        lo = tl.min(tl.where(valid, u, 1 << 32), 0)
        hi = tl.max(tl.where(valid, u, 0), 0) + 1
        tau = tau_level(u, h, q, valid, lo, hi, tl.load(thr_ptr + row), -0x7FFFFFFF - 1)
        sc = score_keys(cand, seed_ptr, row)
        tl.store(out_ptr + row, index(tl.max(tl.where(valid & (h >= tau), sc, KEY_MIN), 0)))
    else:
        tl.store(need_ptr, 1)
    tl.store(epoch + row, ep)
