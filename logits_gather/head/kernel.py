"""The LM head and the gather in one Triton kernel: a persistent GEMM whose epilogue pushes.

What it computes
----------------
``hidden`` ``[m, K]`` (the same on every rank) times this rank's weight slice ``[N, K]``
(``nn.Linear``'s layout), ``y = hidden @ weight.T``, in fp32, rounded once to the buffer's
dtype. Output tile ``(mb, nb)`` is rows ``mb*BM .. +BM`` and columns ``nb*BN .. +BN``;
tile ``t`` is ``nb = t // MT``, ``mb = t % MT`` with ``MT = ceil(m / BM)``, so the row
blocks of one column block run side by side and share the weight tile through L2.
CTA ``c`` of a grid of ``G`` computes tiles ``c, c + G, ...``; its K loop runs ``BK``
columns at a time, software-pipelined ``STAGES`` deep. A tile's bits depend only on
``(BM, BN, BK, warps, STAGES)`` and the inputs, never on the world size, the rank or
the grid: the tile a rank pushes equals the tile the same configuration computes at
world size 1.

The push and the barrier
------------------------
Each finished tile is stored (16-byte vector stores; ``N`` and ``K`` are multiples of 16
and every base is 16-byte aligned, which Triton sees from its argument specialisation)
into columns ``RANK * N + n0`` of the chosen slot on every rank, its own included. After
its last tile a CTA meets its counterparts at the push gather's barrier, with the same
flags, slots, call counters and graph-mode entry handshake (``logits_gather/kernel.py``
documents the protocol once; ``signal_all`` and ``wait_flag`` are its helpers). A call
of this kernel is one call of the protocol: CTA ``c`` takes part iff ``c < G(m)``, the
same on every rank, since ``G`` is a function of ``m`` and the tile configuration, which
every rank picks from the same table (``table.py``). The grid never exceeds the
object's CTA budget (SMs divided among the ranks sharing a GPU), so every CTA of every
rank is resident at once and spinning is safe. With ``WORLD == 1`` there is no barrier:
the kernel is a plain GEMM into the local slot.

Measured outcome of the tile sweep: see ``table.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..kernel import (
    ARRIVE,
    CALLS,
    GCALLS,
    LANES,
    READY,
    TIMEOUT_AT_ENTRY,
    TIMEOUT_AT_EXIT,
    signal_all,
    wait_flag,
)


@triton.jit
def _push(d, rows, cols, y, ROW, mask, RANK: tl.constexpr, N):
    tl.store(d + rows[:, None].to(tl.int64) * ROW + RANK * N + cols[None, :], y, mask=mask)


@triton.jit(do_not_specialize=["m", "timeout_us"])
def head_kernel(
    x,
    w,
    d0,
    d1,
    d2,
    d3,
    d4,
    d5,
    d6,
    d7,
    flags,
    peer_flags,
    status,
    m,
    N,
    K,
    timeout_us,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    MAXC: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    STAGES: tl.constexpr,
    GRAPH: tl.constexpr,
    NUM_THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    if WORLD > 1:
        calls = tl.load(flags + CALLS * MAXC + pid)
        lanes = tl.arange(0, LANES)
        to_rank = lanes < WORLD
        peers = tl.load(peer_flags + lanes, mask=to_rank, other=0).to(tl.pointer_type(tl.int32))
        if GRAPH:
            gcalls = tl.load(flags + GCALLS * MAXC + pid)
            signal_all(peers + READY * MAXC + pid, to_rank)
            wait_flag(
                flags + READY * MAXC + pid,
                (gcalls + 1) * WORLD,
                timeout_us,
                status,
                TIMEOUT_AT_ENTRY,
                NUM_THREADS,
                TRAP,
            )

    ROW = WORLD * N
    mt = (m + BM - 1) // BM
    tiles = (N + BN - 1) // BN * mt
    ks = tl.arange(0, BK)
    t = pid  # a while loop: Triton's interpreter cannot start a range at program_id
    while t < tiles:
        rows = (t % mt) * BM + tl.arange(0, BM)
        cols = (t // mt) * BN + tl.arange(0, BN)
        xp = x + rows[:, None].to(tl.int64) * K + ks[None, :]
        wp = w + cols[:, None].to(tl.int64) * K + ks[None, :]
        row_ok = rows[:, None] < m
        col_ok = cols[:, None] < N
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for _ in tl.range(0, K // BK, num_stages=STAGES):
            a = tl.load(xp, mask=row_ok, other=0.0)
            b = tl.load(wp, mask=col_ok, other=0.0)
            acc = tl.dot(a, tl.trans(b), acc)
            xp += BK
            wp += BK
        y = acc.to(d0.dtype.element_ty)
        mask = (rows[:, None] < m) & (cols[None, :] < N)
        _push(d0, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 1:
            _push(d1, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 2:
            _push(d2, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 3:
            _push(d3, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 4:
            _push(d4, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 5:
            _push(d5, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 6:
            _push(d6, rows, cols, y, ROW, mask, RANK, N)
        if WORLD > 7:
            _push(d7, rows, cols, y, ROW, mask, RANK, N)
        t += grid

    if WORLD > 1:
        tl.debug_barrier()
        signal_all(peers + ARRIVE * MAXC + pid, to_rank)
        wait_flag(
            flags + ARRIVE * MAXC + pid,
            (calls + 1) * WORLD,
            timeout_us,
            status,
            TIMEOUT_AT_EXIT,
            NUM_THREADS,
            TRAP,
        )
        tl.store(flags + CALLS * MAXC + pid, calls + 1)
        if GRAPH:
            tl.store(flags + GCALLS * MAXC + pid, gcalls + 1)
