"""The push all-gather kernel (Triton) and its protocol.

Layout
------
Every rank owns, in torch symmetric memory,

* ``slots``: ``[S, capacity, W * N]`` output buffers (``W`` ranks, ``N`` columns
  per rank). Slots ``0..2`` serve eager calls in rotation; slots ``3..4`` serve
  calls captured in CUDA graphs (when the object was built with
  ``graphs=True``).
* ``flags``: ``int32 [4, MAXC]``, one column per CTA index ``c``:
  ``ARRIVE`` and ``READY`` are written by every rank (remote atomics);
  ``CALLS`` and ``GCALLS`` are this rank's private per-CTA call counters.

Data path
---------
Call with ``m`` rows: tile ``t`` of the ``m x N`` shard (one row, ``BLOCK``
columns) is handled by CTA ``t mod G`` on every rank. ``G``, ``BLOCK`` and the
warp count come from a per-``m`` launch plan fixed at construction from
arguments every rank shares (see ``push.py``), so all ranks launch the same
grid. The CTA reads the tile once and stores it with 16-byte vector stores into
column block ``rank`` of the chosen slot on every rank, its own included. A
ragged tail is masked; when ``N`` is not a multiple of the vector width Triton
cannot prove alignment and falls back to narrower stores, so no store is ever
misaligned.

Barrier (exit)
--------------
After its stores a CTA runs a CTA barrier (``tl.debug_barrier``), then adds 1 to
``ARRIVE[c]`` on every rank with ONE vector atomic (release, system scope) whose
lanes are the ranks: lane ``p`` is performed by one thread and targets rank
``p``'s flag. The CTA barrier orders every thread's stores before each lane's
release (release is cumulative). It then waits until its own ``ARRIVE[c]``
reaches ``W * (calls + 1)`` (acquire, system scope), where ``calls`` is
``CALLS[c]`` at entry, and finally stores ``CALLS[c] = calls + 1``.

Why one vector atomic: the first version issued one scalar release atomic per
peer from one thread, and each release waited for the previous atomic's NVLink
round trip. Measured on 2 H200s (one CTA signalling a peer ``K`` times, then
waiting, graph replay): ``K`` scalar releases cost 2.04 / 2.91 / 4.86 / 8.73 µs
for K = 1 / 2 / 4 / 8, one ``K``-lane vector atomic 2.1-2.2 µs for every ``K``.

The wait polls with ``atomic_add(flag, 0, sem="acquire", scope="sys")`` (an
acquire read-modify-write by one thread, broadcast to the CTA). A variant in
which thread 0 spun on a plain ``ld.acquire.sys`` in inline PTX measured no
faster (2 H200s, tp=2, M=1 under graph replay: 5.51 against 5.26 µs), nor did
loading the next tile before storing the current one; both were removed. The
figures are in ``docs/design.md``.

Epochs never reset. Every rank launches CTA ``c`` in exactly the same calls, so
``CALLS[c]`` agrees on all ranks and ``ARRIVE[c]`` only grows. While a CTA waits
for call ``k`` its flag lies in ``[W*k - W + 1, W*(k+1) + W - 1]``: no rank can
arrive for call ``k + 2`` before every rank has passed call ``k + 1``'s barrier.
The comparison is the signed 32-bit difference ``ARRIVE - target >= 0``, so the
counters may wrap around 2**32 freely. A launch plan that gives different ``m``
different grids is safe for the same reason: CTA ``c`` takes part in a call iff
``c < G(m)``, the same on every rank.

Because the counters live on the device, a replayed CUDA graph needs no host
state: each replay reads and advances them itself.

Why three eager slots suffice
-----------------------------
Eager call ``k`` uses slot ``k mod 3``. Rank A writes rank B's slot for call
``k + 3`` only after A passed call ``k + 2``'s barrier, which needs B's CTAs to
have started call ``k + 2``, i.e. B's stream finished everything enqueued before
call ``k + 2``. So the result of call ``k`` stays valid for all work that the
caller enqueues (on the calling stream) before it issues call ``k + 2``, reads
issued after call ``k + 1`` included. (With two slots, reads issued after call
``k + 1`` would race with a fast peer's call ``k + 2``.)

Graph mode (entry handshake)
----------------------------
A captured call's slot address is frozen in the graph, so rotation cannot
protect it. Graph-mode calls (``GRAPH=True``) therefore first add 1 to
``READY[c]`` on every rank (the same one vector atomic) and wait until their own
``READY[c]`` reaches ``W * (gcalls + 1)``: no peer writes into a rank's slot
before that rank's kernel has started, i.e. before its stream finished every
earlier reader. Graph calls alternate the two graph slots in capture order, so
their results stay valid until the next graph-mode call on the same slot, and in
any case until the next graph-mode call of the object. Eager calls never touch
graph slots and skip the handshake, so they pay nothing for it.

Co-residency, timeout and trap
------------------------------
Spinning is only safe if every CTA of every rank is resident at once: the grid
never exceeds the SM count (divided by the number of ranks sharing one GPU).
A wait that outlasts ``timeout_us`` writes ``[code, cta, seen, target]`` into a
pinned host status block. With ``TRAP=False`` the CTA then leaves the kernel and
the host raises on its next call (see ``LogitsGather.check``); the timed-out
call's output is incomplete. With ``TRAP=True`` every thread fences the status
block out to the host and executes ``trap``: the kernel aborts, the CUDA context
reports a launch failure to every later CUDA call, and no work enqueued after
the gather can read incomplete data. The timer is ``%globaltimer``, made uniform
across the CTA with a reduction so no thread diverges from the barrier.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer

ARRIVE = tl.constexpr(0)
READY = tl.constexpr(1)
CALLS = tl.constexpr(2)
GCALLS = tl.constexpr(3)
FLAG_ROWS = 4
LANES = tl.constexpr(8)  # the most ranks a kernel group may have (MAX_WORLD in push.py)
TIMEOUT_AT_EXIT = tl.constexpr(1)
TIMEOUT_AT_ENTRY = tl.constexpr(2)


@triton.jit
def now_ns(NUM_THREADS: tl.constexpr):
    # Each thread reads its own clock; the max makes the value CTA-uniform.
    return tl.max(tl.zeros([NUM_THREADS], tl.int64) + globaltimer(), axis=0)


@triton.jit
def signal_all(peer_rows, mask):
    """Adds 1 to one flag on every rank: one lane (one thread) per rank."""
    tl.atomic_add(peer_rows, 1, mask=mask, sem="release", scope="sys")


@triton.jit
def timed_out(status, code, seen, target, TRAP: tl.constexpr):
    tl.store(status + 1, tl.program_id(0))
    tl.store(status + 2, seen)
    tl.store(status + 3, target)
    tl.store(status, code)
    if TRAP:
        # No fence here: any fence in the kernel makes ptxas turn the barrier's
        # fire-and-forget reduction into an atomic that waits for its reply
        # (REDG -> ATOMG), measured +0.5 us per call at M=1. The status stores are
        # issued (CTA barrier) before any thread traps.
        tl.debug_barrier()
        tl.inline_asm_elementwise("trap;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def wait_flag(
    flag, target, timeout_us, status, code, NUM_THREADS: tl.constexpr, TRAP: tl.constexpr
):
    """Waits until ``flag - target >= 0`` (signed, wrap-safe) or the timeout."""
    seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
    if (seen - target) < 0:
        deadline = now_ns(NUM_THREADS) + timeout_us.to(tl.int64) * 1000
        spins = 0
        while (seen - target) < 0:
            seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
            spins += 1
            if (spins % 256) == 0:
                if now_ns(NUM_THREADS) > deadline:
                    timed_out(status, code, seen, target, TRAP)
                    seen = target


@triton.jit
def _load_tile(src, t, N: tl.constexpr, BLOCK: tl.constexpr, TILES_PER_ROW: tl.constexpr):
    """Tile ``t`` of the shard: one row, ``BLOCK`` columns."""
    row = (t // TILES_PER_ROW).to(tl.int64)
    cols = (t % TILES_PER_ROW) * BLOCK + tl.arange(0, BLOCK)
    if N % BLOCK != 0:
        return tl.load(src + row * N + cols, mask=cols < N)
    else:
        return tl.load(src + row * N + cols)


@triton.jit
def _put(dst, off, x, mask, MASKED: tl.constexpr):
    if MASKED:
        tl.store(dst + off, x, mask=mask)
    else:
        tl.store(dst + off, x)


@triton.jit
def _store_tile(
    x,
    t,
    d0,
    d1,
    d2,
    d3,
    d4,
    d5,
    d6,
    d7,
    N: tl.constexpr,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    ROW: tl.constexpr,
    BLOCK: tl.constexpr,
    TILES_PER_ROW: tl.constexpr,
):
    """Stores tile ``t`` into column block ``RANK`` of every rank's slot."""
    MASKED: tl.constexpr = N % BLOCK != 0
    row = (t // TILES_PER_ROW).to(tl.int64)
    cols = (t % TILES_PER_ROW) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    off = row * ROW + RANK * N + cols
    # Unrolled: Triton cannot index a list of pointer arguments at run time.
    _put(d0, off, x, mask, MASKED)
    if WORLD > 1:
        _put(d1, off, x, mask, MASKED)
    if WORLD > 2:
        _put(d2, off, x, mask, MASKED)
    if WORLD > 3:
        _put(d3, off, x, mask, MASKED)
    if WORLD > 4:
        _put(d4, off, x, mask, MASKED)
    if WORLD > 5:
        _put(d5, off, x, mask, MASKED)
    if WORLD > 6:
        _put(d6, off, x, mask, MASKED)
    if WORLD > 7:
        _put(d7, off, x, mask, MASKED)


@triton.jit(do_not_specialize=["m", "timeout_us"])
def push_gather_kernel(
    src,
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
    timeout_us,
    N: tl.constexpr,
    RANK: tl.constexpr,
    WORLD: tl.constexpr,
    MAXC: tl.constexpr,
    BLOCK: tl.constexpr,
    GRAPH: tl.constexpr,
    NUM_THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    calls = tl.load(flags + CALLS * MAXC + pid)
    # Every rank's flag base, loaded before the data loop so the exit signal
    # does not wait for it.
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

    TILES_PER_ROW: tl.constexpr = (N + BLOCK - 1) // BLOCK
    ROW: tl.constexpr = WORLD * N
    for t in range(pid, m * TILES_PER_ROW, grid):
        x = _load_tile(src, t, N, BLOCK, TILES_PER_ROW)
        _store_tile(x, t, d0, d1, d2, d3, d4, d5, d6, d7, N, RANK, WORLD, ROW, BLOCK, TILES_PER_ROW)

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
