"""A per-row ``top_k`` in top-k's launches (imported lazily: needs Triton).

A server's batch mixes rows with top-k on (``1 <= k <= 64``: the fused top-k,
:mod:`.topk`), off (``k`` 0 or ``>= V``) and beyond the fused path (``64 < k < V``).
Without top-p, :func:`.topp.sample_rows_k` serves all of them with top-k's rounds alone
(three launches in eager calls, as a scalar ``k``):

- Round 1 (the probe) runs on every row as it is: it gives every row its greedy key,
  which min-p needs.
- Round 2's first writer is :func:`rowk_local`. A row with ``k`` off writes the sample
  format (:func:`.kernels.sample_write`, or :func:`.kernels.minp_write` after min-p)
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
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .kernels import minp_write, sample_write
from .topk import topk_local


@triton.jit(do_not_specialize=["own", "V", "col0"])
def rowk_local(
    x_ptr, x_stride, t_ptr, low_ptr, flags, k_ptr, seed_ptr, logmp_ptr, gbest_ptr, need_ptr,
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
            minp_write(row, split, x_ptr, x_stride, t_ptr, seed_ptr, logmp_ptr, gbest_ptr, peers,
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


__all__ = ["rowk_local"]
