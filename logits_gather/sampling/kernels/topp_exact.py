"""Top-p's exact in-kernel fallback: the rows that the candidate rounds left undecided.

:func:`nucleus_rest` runs after top-p's rounds (:mod:`.topp`) on every top-p call. Rows
with a token exit at once; an undecided row (token -1) is served by a *team*: ``P``
programs per rank, each over a contiguous ``1 / P`` of the rank's shard row, all ranks'
programs of the row together. The team searches the cut level by passes; each pass is one
scan of the member's columns and one exchange (:mod:`.exchange`) in which every member sends::

    [NB bin weights, n = its elements in range, CS keys (valid when n <= CS)]

A search looks for the largest level ``L`` (an :func:`.keys.ordered32` image of ``s``) at
which the weight of the kept elements at or above ``L`` reaches a target: counts for a
per-row top-k (the target ``min(k, kept)``, so ``L`` is the k-th largest kept ``s``),
then masses :func:`.radix.mass_q` for top-p (the target :func:`.radix.mass_threshold` of
their sum, so ``L`` is the definition's ``tau``). The range ``[lo, hi)`` holding ``L``
starts at ``[lam, ordered32(s_max) + 1)`` where round 1 gave a level ``lam <= tau`` (then
the target is round 1's ``thr``), else at the top-k cut or the lowest int32. A pass cuts
it into ``NB`` bins of a power-of-two width; every member computes the same bin from the
same merged words, so the whole team stays in lockstep. When every member's elements in
range fit its ``CS`` key slots, the pass has them all and the level is found among them
(:func:`.radix.cut_level`). The last pass exchanges each member's best Gumbel score key among
its kept elements at or above ``L``: the token.

Passes are at most 8 per search (``NB = 16``: 4 bits of the 32-bit range per pass); a
search also ends when one level is left in range (bfloat16 inputs: a few passes) or every
element in range fits the key slots. The team's exchanges use consecutive epochs of the
row in this kernel's own mailbox: a member writes pass ``i + 1`` only after it read every
member's words of pass ``i``, so two parities suffice as between kernels. The team's
programs spin on each other, so every program of the grid must be resident at once: the
host bounds the grid (``R`` row slots x ``P``) to one program per SM, and every rank serves
the rows in the same order. All ranks decide the same rows undecided (round 1 merges the
same words), so their teams meet. Once any wait of the sampler timed out (its device flag
``dead``, :func:`_alive`), the kernel serves no more rows: with ``on_timeout="raise"`` a
top-p call with a dead peer returns after its rounds' three timeouts (greedy's wait, round
1's two), none more per pass. The kernel reads that flag in device memory: reading the
pinned status block instead, from every warp of every program, made each row cost about
135 us (one H100, top_p=0.9, V=151552: 34.7 ms at M=256 against 0.27 ms).
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import exchange as ll
from .exchange import row_offset
from .keys import KEY_MIN, best_key, index, key, ordered32, value
from .noise import divisor, noise, row_key, scale
from .radix import cut_level, mass_q, mass_threshold

NB: tl.constexpr = tl.constexpr(16)  # bins per pass
CS: tl.constexpr = tl.constexpr(32)  # key slots per member
WORDS: tl.constexpr = tl.constexpr(16 + 2 + 32)  # a member's words per pass: NB, n, h range, CS
DONE: tl.constexpr = tl.constexpr(0x7FFFFFFF)  # lam of a row with no round-1 level
LOWEST: tl.constexpr = tl.constexpr(-(1 << 31))
HIGHEST: tl.constexpr = tl.constexpr((1 << 31) - 1)
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)


@triton.jit(do_not_specialize=["own", "M", "N", "col0", "V"])
def nucleus_rest(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, k_ptr, gbest_ptr, lam_ptr, thr_ptr,
    out_ptr, peers, box, epoch, pstride, relems, status, dead, timeout_us, own, M, N, col0, V,
    BLOCK: tl.constexpr, MEMB: tl.constexpr, MINP: tl.constexpr, ROWK: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    """Grid ``(R, P)``: program ``(r, part)`` serves part ``part`` of rows ``r, r + R, ..``
    whose token is -1 (``MEMB``: a power of two >= ``WORLD * P``; ``own``: this rank's
    first word in a row, ``rank * P * WORDS``)."""
    ll.enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    alive = _alive(dead, THREADS)  # once: a row's own waits that time out end its passes
    while row < M:  # a while loop: the interpreter cannot range over program ids
        if (tl.load(out_ptr + row) < 0) & alive:
            _rest_row(x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, k_ptr, gbest_ptr,
                      lam_ptr, thr_ptr, out_ptr, peers, box, epoch, pstride, relems, status,
                      dead, timeout_us, own, N, col0, V, row, BLOCK, MEMB, MINP, ROWK, WORLD,
                      THREADS, TRAP)  # fmt: skip
        row += tl.num_programs(0)


@triton.jit
def _rest_row(
    x_ptr, x_stride, t_ptr, seed_ptr, pos_ptr, p_ptr, mp_ptr, k_ptr, gbest_ptr, lam_ptr, thr_ptr,
    out_ptr, peers, box, epoch, pstride, relems, status, dead, timeout_us, own, N, col0, V, row,
    BLOCK: tl.constexpr, MEMB: tl.constexpr, MINP: tl.constexpr, ROWK: tl.constexpr,
    WORLD: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    part = tl.program_id(1)
    parts = tl.num_programs(1)
    if ll.HW:
        span = tl.cdiv(tl.cdiv(N, parts), 4 * BLOCK) * (4 * BLOCK)
        c0 = part * span
        c1 = tl.minimum(c0 + span, N)
    else:  # one member per rank; the interpreter cannot range over program ids
        c0 = 0
        c1 = N
    base = own + part * WORDS
    team = WORLD * parts
    t = tl.load(t_ptr + row)
    d = divisor(t)
    smax = scale(value(tl.load(gbest_ptr + row)), d)
    floor = float("-inf")
    if MINP:
        floor = smax + tl.log(tl.load(mp_ptr + row))
    top = ordered32(smax).to(tl.int64) + 1
    ep = tl.load(epoch + row)
    cut = tl.full((), LOWEST, tl.int64)
    if ROWK:
        kr = tl.load(k_ptr + row)
        if (kr > 0) & (kr < V):
            cut, ep = _search(x_ptr, x_stride, row, c0, c1, col0, d, smax, floor, peers, box,
                              pstride, relems, status, dead, timeout_us, base, team, ep, cut,
                              top, kr, tl.full((), 1.0, tl.float64), True, BLOCK, MEMB, WORLD,
                              THREADS, TRAP)  # fmt: skip
    p = tl.load(p_ptr + row).to(tl.float64)
    if p < 1.0:
        lam = tl.load(lam_ptr + row)
        target = tl.full((), 0, tl.int64)  # from the first pass's sum
        start = cut
        if lam != DONE:
            start = lam.to(tl.int64)
            target = tl.load(thr_ptr + row)
        cut, ep = _search(x_ptr, x_stride, row, c0, c1, col0, d, smax, floor, peers, box,
                          pstride, relems, status, dead, timeout_us, base, team, ep, start, top,
                          target, p, False, BLOCK, MEMB, WORLD, THREADS, TRAP)  # fmt: skip
    if _alive(dead, THREADS):  # the token: every member's best score key at or above cut
        _token(x_ptr, x_stride, row, c0, c1, col0, d, floor, cut, seed_ptr, pos_ptr, out_ptr,
               peers, box, epoch, pstride, relems, status, timeout_us, base, team, ep + 1, part,
               BLOCK, MEMB, WORLD, THREADS, TRAP)  # fmt: skip


@triton.jit
def _alive(dead, THREADS: tl.constexpr):
    """Whether no wait of the sampler has timed out (its device flag ``dead``, int32). After
    one, the kernel gives up at once: each further wait would last the whole timeout again.
    A block-wide reduction, so that every warp takes the same branch ("Uniform polls" in
    :mod:`.exchange`)."""
    return tl.max(tl.load(dead + tl.zeros([THREADS], tl.int32), volatile=True), 0) == 0


@triton.jit
def _token(
    x_ptr, x_stride, row, c0, c1, col0, d, floor, cut, seed_ptr, pos_ptr, out_ptr, peers, box,
    epoch, pstride, relems, status, timeout_us, base, team, ep, part, BLOCK: tl.constexpr,
    MEMB: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """The last pass: every member's best score key among its kept elements at or above
    level ``cut``; member 0 stores the best of all and the row's last epoch ``ep``."""
    off = row_offset(pstride, relems, row, ep)
    h_row = row_key(seed_ptr, pos_ptr, row)
    bg = tl.full([BLOCK], float("-inf"), tl.float32)  # each lane's best score so far
    bj = tl.zeros([BLOCK], tl.int32)  # and its column
    has = tl.zeros([BLOCK], tl.int1)
    if ll.HW:  # four loads in flight, then their work
        for c in range(c0, c1, 4 * BLOCK):
            x0 = _load(x_ptr, x_stride, row, c, c1, BLOCK)
            x1 = _load(x_ptr, x_stride, row, c + BLOCK, c1, BLOCK)
            x2 = _load(x_ptr, x_stride, row, c + 2 * BLOCK, c1, BLOCK)
            x3 = _load(x_ptr, x_stride, row, c + 3 * BLOCK, c1, BLOCK)
            bg, bj, has = _best(x0, c, c1, col0, d, floor, cut, h_row, bg, bj, has, BLOCK)
            bg, bj, has = _best(x1, c + BLOCK, c1, col0, d, floor, cut, h_row, bg, bj, has, BLOCK)
            bg, bj, has = _best(x2, c + 2 * BLOCK, c1, col0, d, floor, cut, h_row, bg, bj, has,
                                BLOCK)  # fmt: skip
            bg, bj, has = _best(x3, c + 3 * BLOCK, c1, col0, d, floor, cut, h_row, bg, bj, has,
                                BLOCK)  # fmt: skip
    else:
        c = c0
        while c < c1:
            x = _load(x_ptr, x_stride, row, c, c1, BLOCK)
            bg, bj, has = _best(x, c, c1, col0, d, floor, cut, h_row, bg, bj, has, BLOCK)
            c += BLOCK
    best = best_key(bg, bj, has)
    ll.put_few(peers, off, base, best, 0, ep, 1, WORLD, THREADS)
    mi = tl.arange(0, MEMB)
    word = ll.wait(box + off, mi * WORDS, mi < team, ep, timeout_us, status, THREADS, TRAP)
    if part == 0:
        tl.store(out_ptr + row, index(tl.max(tl.where(mi < team, word, KEY_MIN), 0)))
        tl.store(epoch + row, ep)  # every member read the epoch before its first word


@triton.jit
def _best(x, c, c1, col0, d, floor, cut, h_row, bg, bj, has, BLOCK: tl.constexpr):
    """Each lane's best score ``bg`` (column ``bj``, ``has`` one) with columns ``c .. c +
    BLOCK``'s (``x``) kept elements at or above level ``cut``: a later column replaces
    only a higher score, so lanes keep the lowest column of a tie (the noise is computed
    only where some element is kept)."""
    s, h, gidx, inside = _chunk(x, c, c1, col0, d, floor, BLOCK)
    kept = inside & (h >= cut)
    if tl.max(kept.to(tl.int32), 0) > 0:
        g = s + noise(h_row, gidx)
        better = kept & (~has | (g > bg))
        bg = tl.where(better, g, bg)
        bj = tl.where(better, gidx, bj)
        has = has | kept
    return bg, bj, has


@triton.jit
def _load(x_ptr, x_stride, row, c, c1, BLOCK: tl.constexpr):
    """Columns ``c .. c + BLOCK`` (before ``c1``) of the row as fp32 (-inf past ``c1``)."""
    cols = c + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < c1, other=float("-inf"))
    return x.to(tl.float32)


@triton.jit
def _chunk(x, c, c1, col0, d, floor, BLOCK: tl.constexpr):
    """``(s, h, global columns, inside)`` of :func:`_load`'s ``x`` at column ``c``;
    ``inside``: before ``c1`` and kept by min-p (``s >= floor``)."""
    cols = c + tl.arange(0, BLOCK)
    s = scale(x, d)
    return s, ordered32(s).to(tl.int64), cols + col0, (cols < c1) & (s >= floor)


@triton.jit
def _bins(
    x, c, c1, col0, d, smax, floor, lo, hi, sh, acc, n, mn, mx, peers, off, base, ep,
    COUNT: tl.constexpr, BLOCK: tl.constexpr, WORLD: tl.constexpr,
):  # fmt: skip
    """One scan step of a pass over columns ``c .. c + BLOCK`` (``x``): their kept
    elements in ``[lo, hi)`` are added to their bins (``acc``, per lane) and to each
    lane's lowest and highest level (``mn``, ``mx``), and counted in ``n`` while it is at
    most ``CS``, their keys going to the member's slots ``n ..``; past ``CS`` (no gather)
    neither, so no block-wide step remains in the scan."""
    s, h, gidx, inside = _chunk(x, c, c1, col0, d, floor, BLOCK)
    inside = inside & (h >= lo) & (h < hi)
    if tl.max(inside.to(tl.int32), 0) > 0:  # the bins cost ~NB x the rest: skip if empty
        if COUNT:
            wt = inside.to(tl.int64)
        else:
            wt = tl.where(inside, mass_q(s, smax), 0)
        b = ((h - lo) >> sh).to(tl.int32)
        acc += tl.where(b[:, None] == tl.arange(0, NB)[None, :], wt[:, None], 0)
        mn = tl.where(inside, tl.minimum(mn, h), mn)
        mx = tl.where(inside, tl.maximum(mx, h), mx)
        if n <= CS:
            slot = n + tl.cumsum(inside.to(tl.int32), 0) - 1
            ll.put(peers, off, base + NB + 2 + slot, key(s, gidx), inside & (slot < CS), ep,
                   WORLD)  # fmt: skip
            n += tl.sum(inside.to(tl.int32), 0)
    return acc, n, mn, mx


@triton.jit
def _search(
    x_ptr, x_stride, row, c0, c1, col0, d, smax, floor, peers, box, pstride, relems, status,
    dead, timeout_us, base, team, ep, lo, hi, target, p, COUNT: tl.constexpr, BLOCK: tl.constexpr,
    MEMB: tl.constexpr, WORLD: tl.constexpr, THREADS: tl.constexpr, TRAP: tl.constexpr,
):  # fmt: skip
    """``(L, epoch)``: the largest level in ``[lo, hi)`` whose weight (counts with
    ``COUNT``, else masses) at or above it reaches ``target`` (``min(target, sum)`` with
    ``COUNT``; 0: the mass threshold of the sum at ``p``). The weight at or above ``lo``
    must reach it, the weight at or above ``hi`` is 0."""
    bins = tl.arange(0, NB)
    slots = tl.arange(0, CS)
    mi = tl.arange(0, MEMB)
    on = mi < team
    above = tl.full((), 0, tl.int64)  # the weight at or above hi
    first = tl.full((), 1, tl.int32)
    alive = _alive(dead, THREADS)
    while (hi - lo > 1) & alive:
        ep += 1
        off = row_offset(pstride, relems, row, ep)
        sh = tl.full((), 0, tl.int64)  # bins of 2**sh levels, NB of them cover [lo, hi)
        # Not NB << sh: Triton 3.8's interpreter cannot shift a global constexpr by a
        # tensor. Both give the same PTX with Triton 3.6.
        while (hi - lo) > (tl.full((), NB, tl.int64) << sh):
            sh += 1
        acc = tl.zeros([BLOCK, NB], tl.int64)
        n = tl.full((), 0, tl.int32)
        mn = tl.full([BLOCK], HIGHEST, tl.int64)
        mx = tl.full([BLOCK], LOWEST, tl.int64)
        if ll.HW:  # four loads in flight, then their work
            for c in range(c0, c1, 4 * BLOCK):
                x0 = _load(x_ptr, x_stride, row, c, c1, BLOCK)
                x1 = _load(x_ptr, x_stride, row, c + BLOCK, c1, BLOCK)
                x2 = _load(x_ptr, x_stride, row, c + 2 * BLOCK, c1, BLOCK)
                x3 = _load(x_ptr, x_stride, row, c + 3 * BLOCK, c1, BLOCK)
                acc, n, mn, mx = _bins(x0, c, c1, col0, d, smax, floor, lo, hi, sh, acc, n, mn,
                                       mx, peers, off, base, ep, COUNT, BLOCK, WORLD)  # fmt: skip
                acc, n, mn, mx = _bins(x1, c + BLOCK, c1, col0, d, smax, floor, lo, hi, sh, acc,
                                       n, mn, mx, peers, off, base, ep, COUNT, BLOCK,
                                       WORLD)  # fmt: skip
                acc, n, mn, mx = _bins(x2, c + 2 * BLOCK, c1, col0, d, smax, floor, lo, hi, sh,
                                       acc, n, mn, mx, peers, off, base, ep, COUNT, BLOCK,
                                       WORLD)  # fmt: skip
                acc, n, mn, mx = _bins(x3, c + 3 * BLOCK, c1, col0, d, smax, floor, lo, hi, sh,
                                       acc, n, mn, mx, peers, off, base, ep, COUNT, BLOCK,
                                       WORLD)  # fmt: skip
        else:  # the interpreter cannot range over a tensor
            c = c0
            while c < c1:
                x = _load(x_ptr, x_stride, row, c, c1, BLOCK)
                acc, n, mn, mx = _bins(x, c, c1, col0, d, smax, floor, lo, hi, sh, acc, n, mn, mx,
                                       peers, off, base, ep, COUNT, BLOCK, WORLD)  # fmt: skip
                c += BLOCK
        ll.put(peers, off, base + bins, tl.sum(acc, 0), bins < NB, ep, WORLD)
        span = (tl.min(mn, 0) << 32) | (tl.max(mx, 0) & LOW)
        ll.put_few(peers, off, base + NB, n.to(tl.int64), span, ep, 2, WORLD, THREADS)
        fill = (slots >= n) & (slots < CS)
        ll.put(peers, off, base + NB + 2 + slots, tl.full([CS], KEY_MIN, tl.int64), fill, ep,
               WORLD)  # fmt: skip
        rowbox = box + off
        wi = mi[:, None] * WORDS + bins[None, :]
        got = ll.wait(rowbox, wi, on[:, None] & (bins[None, :] < NB), ep, timeout_us, status,
                      THREADS, TRAP)  # fmt: skip
        counts, spans = ll.wait2(rowbox, mi * WORDS + NB, mi * WORDS + NB + 1, on, on, ep,
                                 timeout_us, status, THREADS, TRAP)  # fmt: skip
        tw = tl.sum(got, 0)
        if first == 1:
            total = tl.sum(tw, 0)
            if COUNT:
                target = tl.minimum(target, total)
            elif target == 0:
                target = mass_threshold(total, p)
            first = 0
        least = tl.min(tl.where(on, spans >> 32, HIGHEST), 0)  # the range's elements' levels
        most = tl.max(tl.where(on, (spans << 32) >> 32, LOWEST), 0)
        if least == most:  # one level in range: it is the cut
            lo = least
            hi = lo + 1
        elif tl.max(tl.where(on, counts, 0), 0) <= CS:  # every element in range is here
            ki = mi[:, None] * WORDS + NB + 2 + slots[None, :]
            keys = ll.wait(rowbox, ki, on[:, None] & (slots[None, :] < CS), ep, timeout_us,
                           status, THREADS, TRAP)  # fmt: skip
            keys = tl.reshape(keys, [MEMB * CS])
            valid = keys != KEY_MIN
            sv = value(keys)
            hv = ordered32(sv).to(tl.int64)
            if COUNT:
                wv = valid.to(tl.int64)
            else:
                wv = tl.where(valid, mass_q(sv, smax), 0)
            lo = cut_level(hv, wv, lo, hi, target - above)
            hi = lo + 1
        else:
            ge = above + tl.sum(tw, 0) - tl.cumsum(tw, 0) + tw  # the weight at or above bin b
            b = tl.max(tl.where(ge >= target, bins, 0), 0)
            above += tl.sum(tl.where(bins > b, tw, 0), 0)
            start = lo + (b.to(tl.int64) << sh)
            hi = tl.minimum(tl.minimum(start + (1 << sh), hi), most + 1)
            lo = tl.maximum(start, least)
        alive = _alive(dead, THREADS)
    return lo, ep
