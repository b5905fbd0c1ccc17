"""The fused kernels' exchange: low-latency (LL) words, flag and data in one store.

Protocol
--------
A :class:`~..fused.mailbox.Mailbox` is, on every rank, ``int64 [2, capacity, R]`` in
symmetric memory plus a private ``int32 [capacity]`` epoch per row. A 64-bit payload word
travels as two 8-byte *elements*, ``(epoch << 32) | low half`` and ``(epoch << 32) | high
half``, so an element carries its own readiness flag.

- Writers (the ``*_local`` kernels, any number of CTAs per row) read the row's epoch
  ``e``, put ``E = e + 1`` into every element and store their words into parity ``E & 1``
  of the row on every rank, their own included, each element with a single-copy-atomic
  8-byte ``st.relaxed.sys`` (a word's two elements in one 16-byte vector store, :func:`put`).
- The reader (the one CTA of the consumer kernel that handles the row) polls its own
  copy with volatile loads until every element of the row shows ``E``, decodes the
  words, and stores the row's epoch ``E``. It is the only thread block that touches that
  epoch in its kernel, and all its threads load the epoch before the poll's first
  block-wide reduction, so the read-modify-write cannot race.

No fence, flag word or barrier kernel: a reader sees each element old or new, and new
elements are complete by themselves. An element of parity ``E & 1`` holding ``E`` can only
come from this call: the slot last held ``E - 2`` or less, and epochs advance by one per
use of the row on every rank alike (all ranks make the same calls with the same ``M``).
Two parities suffice: a writer on rank A stores for use ``E + 2`` only after its own
reader of use ``E + 1`` finished, which needed rank B's writers of use ``E + 1``, which B's
stream runs after B's reader of use ``E``. Waiting kernels wait only for writers launched
earlier on other ranks' streams, which never wait, so no co-residency is needed (their
grids are bounded where ranks share a GPU). The one-launch kernels elect their reader by
:func:`last_arrival` (its rules are in :mod:`.waiters`).

Uniform polls: every thread of a reader must leave its poll loop at the same poll. The
loop's timer (``now_ns``) and the code after it synchronise the CTA with ``bar.sync``, and
warps that meet different ``bar.sync`` instructions release each other: reductions then mix
partials of different steps (measured: wrong tokens on one rank, words right at rest). A
poll over at least as many elements as threads combines every warp's loads through shared
memory; Triton replicates a poll over fewer in every warp, and its test became a
warp-local ``redux.sync``. So a multi-warp reader polls fewer words than threads in
:func:`_spin` (one lane per thread, block-wide test), crosses a CTA barrier and loads them
again in the caller's layout. ``scripts/support/polls.py`` finds warp-local poll loops in
compiled kernels.

A wait that outlasts ``timeout_us`` records ``[code, cta, seen, target]`` in the mailbox's
pinned status block and traps (``TRAP``) or gives up (:meth:`..fused.mailbox.Mailbox.check`).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ...kernel import now_ns, timed_out

HW: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1")
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)
TIMEOUT_IN_SAMPLING = tl.constexpr(3)


@triton.jit
def enter(PDL: tl.constexpr):
    """The first step of every fused kernel: with ``PDL`` (launched as a programmatic
    dependent, :class:`..fused.launcher.Launcher`), wait until the kernel before it in the
    stream has completed and its memory is visible, then let the next kernel launch.
    The next kernel's programs then load and sit in their own wait while this one runs,
    which hides its launch; none of them touches memory before this kernel ends."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def _st(ptr, value, mask):
    """``st.relaxed.sys.global.b64`` of each element where ``mask`` (the interpreter: a store)."""
    if HW:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p st.relaxed.sys.global.b64 [$1], $3; "
            "mov.b32 $0, 0; }",
            "=r,l,r,l",
            [ptr, mask.to(tl.int32), value],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tl.store(ptr, value, mask=mask)


@triton.jit
def _st2(ptr, lo, hi, mask):
    """``st.relaxed.sys.global.v2.b64`` of ``(lo, hi)`` where ``mask``: each element still
    a single-copy-atomic 8-byte store (PTX models a vector access as its elements')."""
    if HW:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; "
            "@p st.relaxed.sys.global.v2.b64 [$1], {$3, $4}; mov.b32 $0, 0; }",
            "=r,l,r,l,l",
            [ptr, mask.to(tl.int32), lo, hi],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tl.store(ptr, lo, mask=mask)
        tl.store(ptr + 1, hi, mask=mask)


@triton.jit
def _element(half, ep):
    return ((ep.to(tl.int64) & LOW) << 32) | (half & LOW)


@triton.jit
def _st_all(peers, rowoff, at, value, mask, WORLD: tl.constexpr):
    """:func:`_st` of ``value`` at element offsets ``rowoff + at`` on every rank."""
    for p in tl.static_range(WORLD):
        _st(tl.load(peers + p).to(tl.pointer_type(tl.int64)) + rowoff + at, value, mask)


@triton.jit
def put(peers, rowoff, off, words, mask, ep, WORLD: tl.constexpr):
    """Stores 64-bit ``words`` (any shape) at word offsets ``off`` of row offset ``rowoff``
    in every rank's mailbox (``peers``: int64 ``[WORLD]`` base addresses)."""
    lo = _element(words, ep)
    hi = _element(words >> 32, ep)
    for p in tl.static_range(WORLD):
        base = tl.load(peers + p).to(tl.pointer_type(tl.int64)) + rowoff
        _st2(base + 2 * off, lo, hi, mask)


@triton.jit
def lanes_init(THREADS: tl.constexpr):
    """Per-thread lanes of a small word list (thread ``2q`` and ``2q + 1`` hold the low and
    high half of word ``q``), every word KEY_MIN; fill with :func:`lane_word`."""
    i = tl.arange(0, THREADS)
    return tl.where(i % 2 == 0, 0, -(1 << 31)).to(tl.int64)


@triton.jit
def lane_word(lanes, q, w, THREADS: tl.constexpr):
    """``lanes`` with word ``q`` set to the scalar ``w``."""
    i = tl.arange(0, THREADS)
    return tl.where(i // 2 == q, tl.where(i % 2 == 0, w, w >> 32), lanes)


@triton.jit
def put_lanes(peers, rowoff, off, lanes, nwords, ep, WORLD: tl.constexpr, THREADS: tl.constexpr):
    """Stores words ``0 .. nwords - 1`` of ``lanes`` at word offset ``off`` on every rank,
    one thread per element."""
    i = tl.arange(0, THREADS)
    _st_all(peers, rowoff, 2 * off + i, _element(lanes, ep), i < 2 * nwords, WORLD)


@triton.jit
def put_few(
    peers, rowoff, off, w0, w1, ep, NW: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr
):
    """Stores ``NW`` (1 or 2) scalar words at word offsets ``off, off + 1`` on every rank."""
    lanes = lane_word(lanes_init(THREADS), 0, w0, THREADS)
    if NW > 1:
        lanes = lane_word(lanes, 1, w1, THREADS)
    put_lanes(peers, rowoff, off, lanes, NW, ep, WORLD, THREADS)


@triton.jit
def _ready(lo, hi, mask, ep):
    e = ep.to(tl.int64)
    ok = ((lo >> 32) == e) & ((hi >> 32) == e)
    return tl.min(tl.where(mask, ok, True).to(tl.int32)) == 1


@triton.jit
def _give_up(lo, mask, ep, status, TRAP: tl.constexpr):
    """Records a timed-out wait (the lowest epoch seen) in the status block, then traps,
    or sets the sampler's device flag whose address the block holds and returns
    (:func:`..fused.mailbox.status_block`)."""
    seen = tl.min(tl.where(mask, lo >> 32, ep.to(tl.int64)))
    where = status.to(tl.pointer_type(tl.int32))
    timed_out(where, TIMEOUT_IN_SAMPLING, seen.to(tl.int32), ep, TRAP)
    if not TRAP:
        dead = tl.load(status.to(tl.pointer_type(tl.int64)) + 2, volatile=True)
        tl.store(dead.to(tl.pointer_type(tl.int32)), 1)


@triton.jit
def _spin(at, mask, ep, timeout_us, status, THREADS: tl.constexpr, TRAP: tl.constexpr):
    """Polls elements ``at`` and ``at + 1`` (fewer than ``THREADS``) until all carry ``ep``
    or the timeout, one lane per thread ("Uniform polls"); the caller loads them again."""
    N: tl.constexpr = at.numel
    R: tl.constexpr = THREADS // N
    flat = tl.broadcast_to(tl.reshape(at, [N])[None, :], [R, N])
    live = tl.broadcast_to(tl.reshape(tl.broadcast_to(mask, at.shape), [N])[None, :], [R, N])
    deadline = tl.zeros((), tl.int64)  # set once a poll fails: no timer read otherwise
    spins = 0
    waiting = True
    while waiting:
        lo = tl.load(flat, mask=live, other=0, volatile=True)
        hi = tl.load(flat + 1, mask=live, other=0, volatile=True)
        waiting = not _ready(lo, hi, live, ep)
        if waiting:
            if spins == 0:
                deadline = now_ns(THREADS) + timeout_us.to(tl.int64) * 1000
            spins += 1
            if (spins % 64) == 0:
                if now_ns(THREADS) > deadline:
                    _give_up(lo, live, ep, status, TRAP)
                    waiting = False


@triton.jit
def wait(
    row_ptr,
    idx,
    mask,
    ep,
    timeout_us,
    status,
    THREADS: tl.constexpr,
    TRAP: tl.constexpr,
):
    """Words ``idx`` (any shape; masked-off ones 0) of this rank's row ``row_ptr`` once all
    carry epoch ``ep``. ``status``: the pinned status block's address."""
    at = row_ptr + 2 * idx
    FEW: tl.constexpr = HW and THREADS > 32 and at.numel < THREADS  # see "Uniform polls"
    if FEW:
        _spin(at, mask, ep, timeout_us, status, THREADS, TRAP)
        tl.debug_barrier()
    lo = tl.load(at, mask=mask, other=0, volatile=True)
    hi = tl.load(at + 1, mask=mask, other=0, volatile=True)
    if not HW:  # the interpreter runs writers first, or never: no timer there
        if not _ready(lo, hi, mask, ep):
            lo = _element(lo, ep + 1)  # a wrong epoch: the caller's result is wrong
            hi = _element(hi, ep + 1)
    elif FEW:
        pass  # loaded after the poll and a barrier: every word complete
    elif not _ready(lo, hi, mask, ep):
        deadline = now_ns(THREADS) + timeout_us.to(tl.int64) * 1000
        spins = 0
        while not _ready(lo, hi, mask, ep):
            lo = tl.load(at, mask=mask, other=0, volatile=True)
            hi = tl.load(at + 1, mask=mask, other=0, volatile=True)
            spins += 1
            if (spins % 64) == 0:
                if now_ns(THREADS) > deadline:
                    _give_up(lo, mask, ep, status, TRAP)
                    lo = _element(lo, ep)
                    hi = _element(hi, ep)
    return tl.where(mask, ((hi & LOW) << 32) | (lo & LOW), 0)


@triton.jit
def wait2(row_ptr, ia, ib, ma, mb, ep, timeout_us, status, THREADS: tl.constexpr,
          TRAP: tl.constexpr):  # fmt: skip
    """:func:`wait` for two index sets of one shape (masks ``ma``, ``mb``) in one poll."""
    w = wait(row_ptr, tl.join(ia, ib), tl.join(ma, mb), ep, timeout_us, status, THREADS, TRAP)
    return tl.split(w)


@triton.jit
def wait3(row_ptr, ia, ib, ic, mask, ep, timeout_us, status, THREADS: tl.constexpr,
          TRAP: tl.constexpr):  # fmt: skip
    """:func:`wait` for three index sets of one shape and ``mask`` at once: one poll, so
    one memory round trip when the words are in (the final kernels' common case)."""
    i3 = tl.join(tl.join(ia, ib), tl.join(ic, ic))  # [..., 2, 2]: the fourth repeats ic
    m3 = tl.join(tl.join(mask, mask), tl.join(mask, mask))
    w = wait(row_ptr, i3, m3, ep, timeout_us, status, THREADS, TRAP)
    ab, cc = tl.split(w)
    a, b = tl.split(ab)
    c, _ = tl.split(cc)
    return a, b, c


@triton.jit
def epoch_of(epoch, row):
    """The epoch a use of ``row`` writes and waits for (the row's last one + 1)."""
    return tl.load(epoch + row) + 1


@triton.jit
def row_offset(parity_stride, row_elems, row, ep):
    """Element offset of ``row`` at parity ``ep & 1`` in a mailbox."""
    return (ep & 1).to(tl.int64) * parity_stride + row.to(tl.int64) * row_elems


@triton.jit
def row_target(epoch, pstride, relems, row):
    ep = epoch_of(epoch, row)
    return ep, row_offset(pstride, relems, row, ep)


@triton.jit
def row_box(box, epoch, pstride, relems, row):
    """(epoch, row pointer) of ``row`` of the mailbox, for the caller's own waits."""
    ep, off = row_target(epoch, pstride, relems, row)
    return ep, box + off


@triton.jit
def gathered(
    box, epoch, pstride, relems, status, timeout_us, row, idx, mask,
    THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """(epoch, row pointer, words): ``row`` of the mailbox once every word in ``idx`` is
    in. Final kernels loop over rows: ranks that share a GPU bound their grids."""
    ep, rowbox = row_box(box, epoch, pstride, relems, row)
    words = wait(rowbox, idx, mask, ep, timeout_us, status, THREADS, TRAP)
    return ep, rowbox, words


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
