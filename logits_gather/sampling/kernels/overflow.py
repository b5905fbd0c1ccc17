"""Top-k's second writer of round 2 (imported lazily: needs Triton): the splits
:func:`.topk.topk_local` marked in ``flags`` send their ``k`` largest, by a radix select,
in the same words (the protocol and layout are in :mod:`.topk`)."""

from __future__ import annotations

import triton
import triton.language as tl

from . import ll
from .finals import row_k
from .keys import (
    KEY_MIN,
    LOW,
    divisor,
    key,
    ordered32,
    radix_bits,
    row_key,
    scale,
    scores,
    top_select,
)
from .writers import load_at, row_target


@triton.jit(do_not_specialize=["own", "k", "col0"])
def topk_overflow(
    x_ptr, x_stride, t_ptr, seed_ptr, flags, peers, epoch, pstride, relems, own, k, S, N, col0,
    BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    SP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """The splits :func:`topk_local` marked: their ``k`` (<= KP) largest elements. Program
    ``(row, p)`` of ``(M, P)`` serves the row's splits ``p, p + P, ..`` (``S`` of them,
    ``SP >= S``): one load of their flags, then the marked ones in turn (rare), so that
    the launch costs little when none is marked (it runs on every top-k call)."""
    overflow_write(tl.program_id(0).to(tl.int64), tl.program_id(1), x_ptr, x_stride, t_ptr,
                   seed_ptr, flags, peers, epoch, pstride, relems, own, k, S, N, col0, BLOCK,
                   KP, BITS, ROWK, SP, WORLD, THREADS)  # fmt: skip


@triton.jit
def overflow_write(
    row, p, x_ptr, x_stride, t_ptr, seed_ptr, flags, peers, epoch, pstride, relems, own, k, S,
    N, col0, BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    SP: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    """:func:`topk_overflow`'s work as program ``(row, p)`` (also :mod:`.single`'s)."""
    ep, off = row_target(epoch, pstride, relems, row)
    j = tl.arange(0, SP)
    mine = (j < S) & (j % tl.num_programs(1) == p)
    todo = mine & (tl.load(flags + row * S + j, mask=mine, other=0) == ep)
    while tl.max(todo.to(tl.int32), 0) == 1:
        split = tl.min(tl.where(todo, j, SP), 0)
        todo = todo & (j != split)
        _overflow_split(x_ptr, x_stride, t_ptr, seed_ptr, peers, off, ep, own, k, N, col0,
                        row, split, BLOCK, KP, BITS, ROWK, WORLD, THREADS)  # fmt: skip


@triton.jit
def _overflow_split(
    x_ptr, x_stride, t_ptr, seed_ptr, peers, off, ep, own, k, N, col0, row, split,
    BLOCK: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, ROWK: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr,
):  # fmt: skip
    row, cols, mask, x, gidx = load_at(x_ptr, x_stride, N, col0, row, split, BLOCK)
    t = tl.load(t_ptr + row)
    r = divisor(t)
    s = scale(x, r)
    h = ordered32(s)
    kr = row_k(k, row, ROWK)
    sel, slot, v, overflow = top_select(h, radix_bits(x, BITS), mask, kr, BITS)
    tie = tl.full((), KEY_MIN, tl.int64)
    floor = tl.full((), KEY_MIN, tl.int64)
    if overflow:
        eq = mask & (h == v)
        g = scores(x, r, row_key(seed_ptr, row), gidx)[1]
        tie = tl.max(tl.where(eq, key(g, gidx), KEY_MIN), 0)
        left = tl.sum((eq & ~sel).to(tl.int32), 0).to(tl.int64)
        floor = (left << 32) | (v.to(tl.int64) & LOW)
    sel = sel & (slot < KP)  # k <= KP: a guard
    base = own + split * (2 + KP)
    ll.put_few(peers, off, base, tie, floor, ep, 2, WORLD, THREADS)
    ll.put(peers, off, base + 2 + slot, key(s, gidx), sel, ep, WORLD)
    j = tl.arange(0, KP)
    count = tl.sum(sel.to(tl.int32), 0)
    ll.put(peers, off, base + 2 + j, tl.full([KP], KEY_MIN, tl.int64), j >= count, ep, WORLD)


__all__ = ["overflow_write", "topk_overflow"]
