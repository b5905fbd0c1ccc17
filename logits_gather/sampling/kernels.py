"""Triton kernels of the fused sampling path (imported lazily: needs Triton and a GPU).

Every operation is one ``*_local`` kernel, one exchange and one ``*_final`` kernel.
A local kernel runs on a ``(M, S)`` grid: program ``(row, split)`` reads
``BLOCK`` columns of its row once, keeps everything in registers and writes a
few int64 words straight into the exchange payload, at row ``row``, words
``split * F .. split * F + F - 1`` (``F`` per operation, see :mod:`.fused`).
The final kernel reads the gathered payloads of all ``W * S`` splits of a row.

Keys: an fp32 value ``v`` and a global column ``j`` become one int64
``ord(v) * 2**32 + (2**32 - 1 - j)``, where ``ord`` maps the fp32 bits to an
order-preserving signed int (``-0.0`` as ``+0.0``, every NaN as one NaN above
``+inf``). ``max`` of keys is the largest value, lowest column on ties: that is
``torch.argmax``'s rule, so maxima of keys compose across splits and ranks.

Noise: :mod:`.rng`'s SplitMix64 in uint64 arithmetic, the temperature division
with ``div_rn`` and ``log`` from libdevice, so scores equal the torch ops'
bits on the same GPU (tests/test_sampling_gpu.py checks this).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

GAMMA: tl.constexpr = tl.constexpr(0x9E3779B97F4A7C15)
MIX1: tl.constexpr = tl.constexpr(0xBF58476D1CE4E5B9)
MIX2: tl.constexpr = tl.constexpr(0x94D049BB133111EB)
KEY_MIN: tl.constexpr = tl.constexpr(-(1 << 63))
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)


@triton.jit
def _ord(v):
    b = v.to(tl.int32, bitcast=True)
    b = tl.where(v == 0.0, 0, b)
    b = tl.where(v != v, 0x7FC00000, b)
    b = tl.where(b < 0, b ^ 0x7FFFFFFF, b)
    return b.to(tl.int64)


@triton.jit
def _key(v, gidx):
    return (_ord(v) << 32) | (LOW - gidx)


@triton.jit
def _value(key):
    hi = (key >> 32).to(tl.int32)
    return tl.where(hi < 0, hi ^ 0x7FFFFFFF, hi).to(tl.float32, bitcast=True)


@triton.jit
def _index(key):
    return LOW - (key & LOW)


@triton.jit
def _row_key(seed):
    z = seed.to(tl.uint64, bitcast=True) * GAMMA
    z = (z ^ (z >> 30)) * MIX1
    z = (z ^ (z >> 27)) * MIX2
    return z ^ (z >> 31)


@triton.jit
def nlnl(rkey, gidx):
    """``log(-log(u))`` for row key ``rkey`` (uint64) and global columns ``gidx`` (int64)."""
    z = rkey + (gidx + 1).to(tl.uint64, bitcast=True) * GAMMA
    z = (z ^ (z >> 30)) * MIX1
    z = (z ^ (z >> 27)) * MIX2
    h = (z >> 41).to(tl.int32)
    u = (h.to(tl.float32) + 0.5) * 1.1920928955078125e-07
    return libdevice.log(-libdevice.log(u))


@triton.jit
def _scores(x, t, rkey, gidx):
    te = tl.where(t > 0.0, t, 1.0)
    s = tl.math.div_rn(x, te)
    return s, s - nlnl(rkey, gidx)


@triton.jit
def noise_kernel(seed_ptr, t_ptr, x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Test helper: ``out[row, j] = x / T - log(-log(u))`` for global columns ``j`` (fp32)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    t = tl.load(t_ptr + row)
    _, g = _scores(x, t, _row_key(tl.load(seed_ptr + row)), cols)
    tl.store(out_ptr + row * N + cols, g, mask=mask)


@triton.jit
def scores_kernel(x_ptr, x_stride, t_ptr, seed_ptr, s_ptr, g_ptr, N, col0, BLOCK: tl.constexpr):
    """The filter path's elementwise pass: ``s = x / T`` and ``g = s - log(-log(u))``
    (``T`` 0 read as 1), fp32 ``[M, N]`` contiguous outputs, global columns from ``col0``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    s, g = _scores(x, tl.load(t_ptr + row), _row_key(tl.load(seed_ptr + row)), cols + col0)
    tl.store(s_ptr + row * N + cols, s, mask=mask)
    tl.store(g_ptr + row * N + cols, g, mask=mask)


@triton.jit
def _load_row(x_ptr, x_stride, N, col0, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    return row, cols, mask, x, cols + col0


@triton.jit
def greedy_local(x_ptr, x_stride, out_ptr, out_stride, N, col0, BLOCK: tl.constexpr):
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    best = tl.max(tl.where(mask, _key(x, gidx), KEY_MIN), 0)
    out = out_ptr.to(tl.pointer_type(tl.int64), bitcast=True)
    tl.store(out + row * out_stride + tl.program_id(1), best)


@triton.jit
def sample_local(
    x_ptr,
    x_stride,
    t_ptr,
    seed_ptr,
    out_ptr,
    out_stride,
    N,
    col0,
    BLOCK: tl.constexpr,
    KP: tl.constexpr,
):
    """Words per split: ``KP == 0``: [greedy key, best score key];
    ``KP > 0``: [greedy key, KP value keys (s, column), KP score keys (g, column)]."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    split = tl.program_id(1)
    out = out_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * out_stride
    t = tl.load(t_ptr + row)
    rkey = _row_key(tl.load(seed_ptr + row))
    s, g = _scores(x, t, rkey, gidx)
    gkey = tl.where(mask, _key(g, gidx), KEY_MIN)
    F: tl.constexpr = 2 if KP == 0 else 1 + 2 * KP
    tl.store(out + split * F, tl.max(tl.where(mask, _key(x, gidx), KEY_MIN), 0))
    if KP == 0:
        tl.store(out + split * F + 1, tl.max(gkey, 0))
    else:
        # The KP largest s (ties: lower column first). Elements equal to the
        # smallest sent value may be more than were sent, so every sent entry
        # of that value carries the best score among all of them.
        skey = tl.where(mask, _key(s, gidx), KEY_MIN)
        top = tl.topk(skey, KP)
        last = tl.min(top, 0)
        tie = mask & ((skey >> 32) == (last >> 32))
        tie_best = tl.max(tl.where(tie, gkey, KEY_MIN), 0)
        cidx = _index(top)
        cs = _value(top)
        cg = _key(cs - nlnl(rkey, cidx), cidx)
        cg = tl.where((top >> 32) == (last >> 32), tie_best, cg)
        cg = tl.where(top == KEY_MIN, KEY_MIN, cg)
        base = out + split * F + 1 + tl.arange(0, KP)
        tl.store(base, top)
        tl.store(base + KP, cg)


@triton.jit
def minp_local(
    x_ptr,
    x_stride,
    t_ptr,
    seed_ptr,
    logmp_ptr,
    gx_ptr,
    gx_row_words,
    GC,
    out_ptr,
    out_stride,
    N,
    col0,
    BLOCK: tl.constexpr,
    CAND: tl.constexpr,
):
    """min-p, after the greedy exchange: words per split [global greedy key, best score key
    among ``(s - s_max) >= log(min_p)``]; ``gx`` holds every split's greedy key, whose
    maximum gives ``s_max = x_max / T``."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    split = tl.program_id(1)
    out = out_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * out_stride
    gx = gx_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * gx_row_words
    i = tl.arange(0, CAND)
    gbest = tl.max(tl.load(gx + i, mask=i < GC, other=KEY_MIN), 0)
    t = tl.load(t_ptr + row)
    smax = tl.math.div_rn(_value(gbest), tl.where(t > 0.0, t, 1.0))
    s, g = _scores(x, t, _row_key(tl.load(seed_ptr + row)), gidx)
    keep = mask & ((s - smax) >= tl.load(logmp_ptr + row))
    tl.store(out + split * 2, gbest)
    tl.store(out + split * 2 + 1, tl.max(tl.where(keep, _key(g, gidx), KEY_MIN), 0))


@triton.jit
def greedy_final(g_ptr, out_ptr, row_words, C, CAND: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = g_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * row_words
    i = tl.arange(0, CAND)
    best = tl.max(tl.load(g + i, mask=i < C, other=KEY_MIN), 0)
    tl.store(out_ptr + row, _index(best))


@triton.jit
def _use_greedy(t, gbest):
    smax = tl.math.div_rn(_value(gbest), tl.where(t > 0.0, t, 1.0))
    return (t == 0.0) | (smax != smax) | (tl.abs(smax) == float("inf"))


@triton.jit
def sample_final(
    g_ptr,
    t_ptr,
    out_ptr,
    row_words,
    C,
    k,
    CAND: tl.constexpr,
    KP: tl.constexpr,
    KCAND: tl.constexpr,
):
    """``C`` splits (all ranks) of ``1 + 2 * KP`` words (``2`` when ``KP == 0``)."""
    row = tl.program_id(0).to(tl.int64)
    g = g_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * row_words
    i = tl.arange(0, CAND)
    F: tl.constexpr = 2 if KP == 0 else 1 + 2 * KP
    gbest = tl.max(tl.load(g + i * F, mask=i < C, other=KEY_MIN), 0)
    if KP == 0:
        sbest = tl.max(tl.load(g + i * F + 1, mask=i < C, other=KEY_MIN), 0)
    else:
        c = tl.arange(0, KCAND)
        where = g + (c // KP) * F + 1 + (c % KP)
        ok = c < C * KP
        skey = tl.load(where, mask=ok, other=KEY_MIN)
        score = tl.load(where + KP, mask=ok, other=KEY_MIN)
        top = tl.topk(skey, KP)
        kth = tl.max(tl.where(tl.arange(0, KP) == k - 1, top, KEY_MIN), 0)
        keep = ok & ((skey >> 32) >= (kth >> 32))
        sbest = tl.max(tl.where(keep, score, KEY_MIN), 0)
    t = tl.load(t_ptr + row)
    tok = tl.where(_use_greedy(t, gbest), _index(gbest), _index(sbest))
    tl.store(out_ptr + row, tok)


@triton.jit
def logprobs_local(
    x_ptr, x_stride, ids_ptr, out_ptr, out_stride, N, col0, BLOCK: tl.constexpr, NP: tl.constexpr
):
    """Row words: [token logit (fp32), pad], then per split [max, sum exp] (fp32 pair)
    and ``NP`` sort keys (logit, column) of the split's largest logits."""
    row, cols, mask, x, gidx = _load_row(x_ptr, x_stride, N, col0, BLOCK)
    split = tl.program_id(1)
    out = out_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * out_stride
    outf = out.to(tl.pointer_type(tl.float32), bitcast=True)
    m = tl.max(x, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    total = tl.sum(tl.where(mask, libdevice.exp(x - shift), 0.0), 0)
    word = 1 + split * (1 + NP)
    tl.store(outf + 2 * word, m)
    tl.store(outf + 2 * word + 1, total)
    if split == 0:
        local = tl.load(ids_ptr + row) - col0
        mine = (local >= 0) & (local < N)
        v = tl.load(x_ptr + row * x_stride + local, mask=mine, other=0.0).to(tl.float32)
        tl.store(outf, v, mask=mine)
    if NP > 0:
        top = tl.topk(tl.where(mask, _key(x, gidx), KEY_MIN), NP)
        tl.store(out + word + 1 + tl.arange(0, NP), top)


@triton.jit
def logprobs_final(
    g_ptr,
    ids_ptr,
    lp_ptr,
    top_ids_ptr,
    top_lp_ptr,
    row_words,
    rank_words,
    S,
    C,
    N,
    W,
    n,
    CAND: tl.constexpr,
    NP: tl.constexpr,
    NCAND: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    g = g_ptr.to(tl.pointer_type(tl.int64), bitcast=True) + row * row_words
    gf = g.to(tl.pointer_type(tl.float32), bitcast=True)
    i = tl.arange(0, CAND)
    word = (i // S) * rank_words + 1 + (i % S) * (1 + NP)
    maxima = tl.load(gf + 2 * word, mask=i < C, other=float("-inf"))
    sums = tl.load(gf + 2 * word + 1, mask=i < C, other=0.0)
    big = tl.max(maxima, 0)
    # tl.max skips NaN; a NaN logit makes its split's sum NaN, and so the result.
    total = tl.sum(tl.where(i < C, sums * libdevice.exp(maxima - big), 0.0), 0)
    lse = libdevice.log(total)
    tok = tl.load(ids_ptr + row)
    owner = tl.minimum(tl.maximum(tok // N, 0), W - 1)
    tl.store(lp_ptr + row, tl.load(gf + 2 * owner * rank_words) - big - lse)
    if NP > 0:
        c = tl.arange(0, NCAND)
        cw = (c // (S * NP)) * rank_words + 1 + ((c // NP) % S) * (1 + NP) + 1 + c % NP
        keys = tl.load(g + cw, mask=c < C * NP, other=KEY_MIN)
        top = tl.topk(keys, NP)
        j = tl.arange(0, NP)
        tl.store(top_ids_ptr + row * n + j, _index(top), mask=j < n)
        tl.store(top_lp_ptr + row * n + j, _value(top) - big - lse, mask=j < n)
