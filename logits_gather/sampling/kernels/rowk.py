"""A per-row ``top_k`` in the launches of one fused path (imported lazily: needs Triton).

A server's batch mixes rows with top-k on (``1 <= k <= 64``: the fused top-k,
:mod:`.topk`), off (``k`` 0 or ``>= V``) and beyond the fused top-k (``64 < k < V``).
:func:`.fallback.sample_rows_k` serves all of them in three launches in eager calls:
without top-p in top-k's rounds, with top-p in top-p's (below).

Without top-p:

- Round 1 (the probe) runs on every row as it is: it gives every row its greedy key,
  which min-p needs.
- Round 2's first writer is :func:`rowk_local`. A row with ``k`` off writes the sample
  format (:func:`.writers.sample_write`, or :func:`.writers.minp_write` after min-p)
  into its first two words per split of top-k's layout (``2 + KP`` words per split),
  and marks no split for the overflow writer (its flags are ``-epoch``, as a split that
  fits). Other rows run :func:`.topk.topk_local`.
- The final row work (``PLAIN``, :func:`.topk.topk_row`) reads such a row as
  :func:`.finals.sample_row` does, at stride ``2 + KP``; other rows as top-k.
- Program ``(0, 0)`` of :func:`rowk_local` sets ``need`` to whether some row has ``64
  < k < V``; those rows' tokens are junk, and the caller's exact fallback recomputes the
  call. The flag is written on every call, by one program.

The words of an off row are the sample path's words, and the reduction is the same, so
its token is the sample path's (with min-p: min-p's).

With top-p, top-p's round 1 (:mod:`.nucleus`) serves every row. Its candidates are an
upper set of each split's kept elements, so with ``B`` the largest ``s`` any split left
out, every kept element with ``s > B`` is a candidate. :func:`nucleus_k_row` decides a
row whose ``k`` is on (``0 < k < V``, any ``k``) from them alone:

- If at least ``k`` candidates lie above ``B``, the k-th largest of them (by radix key,
  ties counted) is the row's k-th largest kept ``s``. With min-p, the kept set is an
  upper set of ``s``, so that is also the definition's k-th largest of the whole row
  when the kept set holds ``k`` elements or more; it does here. Top-k keeps the
  candidates at or above it: every element equal to the cut value is above ``B``, so
  a candidate.
- If fewer lie above ``B`` and no split left anything out, the candidates are the
  whole kept set, which then has fewer than ``k`` elements: top-k keeps all of it.
- Otherwise the row is undecided: its token is -1, and it sets ``need`` (and ``more``).

A decided row has its kept set in the candidates, so top-p over it is exact there
(the definition's masses, ``thr`` and ``tau`` over that set), and round 2 never serves
it. Rows with ``k`` off are top-p's rows as they are.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .keys import KEY_MIN, divisor, index, scale, value
from .masses import decode_keys, mass_q, mass_threshold, score_keys, tau_level
from .topk import topk_local
from .writers import minp_write, sample_write


@triton.jit(do_not_specialize=["own", "V", "col0"])
def rowk_local(
    x_ptr, x_stride, t_ptr, low_ptr, flags, k_ptr, seed_ptr, mp_ptr, gbest_ptr, need_ptr,
    peers, epoch, pstride, relems, own, V, N, col0, BLOCK: tl.constexpr, KP: tl.constexpr,
    KMAX: tl.constexpr, MINP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """Round 2's first writer for a per-row ``k`` (int64 ``[M]``, values >= 0): the sample
    format where ``k`` is off, :func:`.topk.topk_local` elsewhere; program ``(0, 0)``
    also sets ``need`` (bool ``[1]``) to whether a row has ``KMAX < k < V``."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    if (row == 0) & (split == 0):
        _need(k_ptr, need_ptr, tl.num_programs(0), V, KMAX)
    kr = tl.load(k_ptr + row)
    if (kr == 0) | (kr >= V):
        ep = ll.epoch_of(epoch, row)
        tl.store(flags + row * tl.num_programs(1) + split, -ep)  # nothing to overflow
        F: tl.constexpr = 2 + KP
        if MINP:
            minp_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, mp_ptr, gbest_ptr, peers,
                       epoch, pstride, relems, own, N, col0, BLOCK, WORLD, THREADS, F)  # fmt: skip
        else:
            sample_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, peers, epoch, pstride,
                         relems, own, N, col0, BLOCK, WORLD, THREADS, F)  # fmt: skip
    else:
        topk_local(x_ptr, x_stride, t_ptr, low_ptr, flags, peers, epoch, pstride, relems, own, N,
                   col0, BLOCK, KP, WORLD, THREADS)  # fmt: skip


@triton.jit
def _need(k_ptr, need_ptr, M, V, KMAX: tl.constexpr):
    """``need = any(KMAX < k < V)`` over ``M`` rows, 256 at a time."""
    bad = tl.zeros([256], tl.int32)
    start = 0
    while start < M:
        i = start + tl.arange(0, 256)
        k = tl.load(k_ptr + i, mask=i < M, other=0)
        bad = bad | ((k > KMAX) & (k < V)).to(tl.int32)
        start += 256
    tl.store(need_ptr, tl.max(bad, 0) != 0)


@triton.jit
def nucleus_k_row(cand, on, w, ok, gbest, t, p, k, seed_ptr, row, need_ptr, XBITS: tl.constexpr):
    """The token of a row whose ``top_k`` is on (``0 < k < V``) from top-p's round-1 words
    (``cand`` its candidate keys on the ``on`` lanes, ``w`` each ``ok`` split's largest
    ``s`` left out; ``p`` float64, 1 for off), or -1 with ``need`` and ``more`` set."""
    none = -0x7FFFFFFF - 1
    bound = tl.max(tl.where(ok, w, none), 0)
    valid = on & (cand != KEY_MIN)
    s, h, u, _ = decode_keys(cand, t, valid, XBITS)
    above = valid & (h > bound)  # every kept element with s > B
    n = tl.sum(above.to(tl.int64), 0)
    tok = tl.full((), -1, tl.int64)
    if (n >= k) | (bound == none):
        lo = tl.min(tl.where(above, u, 1 << 32), 0)
        hi = tl.max(tl.where(above, u, 0), 0) + 1
        kth = tau_level(u, h, above.to(tl.int64), above, lo, hi, tl.minimum(k, n), none)
        top = above & (h >= kth)  # the kept set after top-k, ties at the cut included
        tau = kth
        if p < 1.0:
            q = tl.where(top, mass_q(s, scale(value(gbest), divisor(t))), 0)
            lo = tl.min(tl.where(top, u, 1 << 32), 0)
            hi = tl.max(tl.where(top, u, 0), 0) + 1
            tau = tau_level(u, h, q, top, lo, hi, mass_threshold(tl.sum(q, 0), p), none)
        sc = score_keys(cand, seed_ptr, row)
        tok = index(tl.max(tl.where(top & (h >= tau), sc, KEY_MIN), 0))
    else:
        tl.store(need_ptr, 1)
        tl.store(need_ptr + 1, 1)
    return tok


__all__ = ["nucleus_k_row", "rowk_local"]
