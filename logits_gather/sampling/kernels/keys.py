"""Device functions of the fused sampling kernels: sort keys, noise, and top-K selection.

Keys: an fp32 value ``v`` and a global column ``j`` become one int64
``ord(v) * 2**32 + (2**32 - 1 - j)``, where ``ord`` maps the fp32 bits to an
order-preserving signed int (``-0.0`` as ``+0.0``, every NaN as one NaN above
``+inf``). ``max`` of keys is the largest value, lowest column on ties: that is
``torch.argmax``'s rule, so maxima of keys compose across splits and ranks, and
keys are unique within a row.

Noise and temperature: vLLM's V2 definition (murmur3 over seed, position and global
column; its uniform and Gumbel transform; ``x / T`` skipped at T in {0, 1}), written
with the same Triton operations in the same order as vLLM's kernels, so that the
compiled bits agree with theirs on the same GPU (tests/test_sampling_vllm_gpu.py).

Top-K: :func:`top_select` finds a block's ``K`` largest keys without sorting:
a radix select for the K-th largest value (one 256-bin histogram per 8 bits:
two rounds for bfloat16 inputs, four otherwise), then the ties at that value in
column order (a prefix sum), then each selected element's slot (another prefix
sum). Sorting networks (``tl.topk``) and bisections (32 block-wide counts) cost
far more at 4096 elements.
"""

from __future__ import annotations

import triton
import triton.language as tl

KEY_MIN: tl.constexpr = tl.constexpr(-(1 << 63))
LOW: tl.constexpr = tl.constexpr(0xFFFFFFFF)
C1: tl.constexpr = tl.constexpr(0xCC9E2D51)
C2: tl.constexpr = tl.constexpr(0x1B873593)
C3: tl.constexpr = tl.constexpr(0xE6546B64)
F1: tl.constexpr = tl.constexpr(0x85EBCA6B)
F2: tl.constexpr = tl.constexpr(0xC2B2AE35)


@triton.jit
def ordered32(v):
    """fp32 -> an order-preserving int32 image."""
    b = v.to(tl.int32, bitcast=True)
    b = tl.where(v == 0.0, 0, b)
    b = tl.where(v != v, 0x7FC00000, b)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def ordered(v):
    """:func:`ordered32` widened to int64."""
    return ordered32(v).to(tl.int64)


@triton.jit
def key(v, gidx):
    return (ordered(v) << 32) | (LOW - gidx.to(tl.int64))


@triton.jit
def ordered_value(h):
    """The fp32 value of an :func:`ordered32` image (``h`` int32 or uint32 bits)."""
    h = h.to(tl.int32, bitcast=True)
    return tl.where(h < 0, h ^ 0x7FFFFFFF, h).to(tl.float32, bitcast=True)


@triton.jit
def value(k):
    return ordered_value((k >> 32).to(tl.int32))


@triton.jit
def index(k):
    return (k & LOW) ^ LOW  # = LOW - (k & LOW); a tensor first (Triton 3.8 interpreter)


@triton.jit
def key_at(h, gidx, top):
    """``(key, column)`` of the lowest column (``gidx`` int32) whose :func:`ordered32` image
    ``h`` is ``top``, the maximum of ``h``, where invalid elements hold the lowest int32
    (which no ``ordered32`` value is); the key is KEY_MIN if ``top`` is that (none valid)."""
    j = tl.min(tl.where(h == top, gidx, 0x7FFFFFFF), 0)
    k = (top.to(tl.int64) << 32) | (LOW - j.to(tl.int64))
    return tl.where(top == -0x7FFFFFFF - 1, KEY_MIN, k), j


@triton.jit
def best_key(v, gidx, valid):
    """``max(key(v, gidx))`` (``gidx`` int32) over the valid elements (KEY_MIN if none),
    by an int32 max and an index min: cheaper than building and reducing 64-bit keys."""
    h = tl.where(valid, ordered32(v), -0x7FFFFFFF - 1)
    return key_at(h, gidx, tl.max(h, 0))[0]


@triton.jit
def argmax_key(v, gidx, valid):
    """``best_key(v, gidx, valid)`` for ``v`` without NaN (a float max, then the lowest
    valid column holding it; ``-0.0`` equals ``+0.0``): about a third of the work.
    Callers use it only where a NaN cannot decide the answer."""
    top = tl.max(tl.where(valid, v, float("-inf")), 0)
    j = tl.min(tl.where(valid & (v == top), gidx, 0x7FFFFFFF), 0)
    return tl.where(j == 0x7FFFFFFF, KEY_MIN, key(top, j))


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def max_or_nan(v, valid):
    """The largest valid ``v``, NaN if any valid ``v`` is NaN, -inf if none is valid."""
    return tl.reduce(tl.where(valid, v, float("-inf")), 0, _max_nan)


@triton.jit
def _rotl(v, shift: tl.constexpr):
    return (v << shift) | (v >> (32 - shift))


@triton.jit
def _mix(h, k):
    """One murmur3 block: ``k`` (uint32) mixed into the state ``h``."""
    k = k * tl.full((), C1, tl.uint32)
    k = _rotl(k, 15) * tl.full((), C2, tl.uint32)
    h = _rotl(h ^ k, 13)
    return h * 5 + tl.full((), C3, tl.uint32)


@triton.jit
def row_key(rows_ptr, row):
    """The row's murmur3 state (uint32) after its three row words: seed low 32 bits, seed
    high 32 bits, position low 32 bits, from ``rows_ptr`` (int64 ``[M, 2]``: seed,
    position). :func:`noise` mixes the global column in per element."""
    seed = tl.load(rows_ptr + 2 * row)
    pos = tl.load(rows_ptr + 2 * row + 1)
    h = tl.zeros((), tl.uint32)
    h = _mix(h, (seed & LOW).to(tl.uint32))
    h = _mix(h, ((seed >> 32) & LOW).to(tl.uint32))
    return _mix(h, (pos & LOW).to(tl.uint32))


@triton.jit
def _log1p_neg(u):
    """``log(1 - u)``: the degree-8 Horner series below 0.25, ``log(max(1 - u, 2**-24))``
    above, in the definition's order of operations (ptxas fuses the steps into FMAs the
    same way for the same code)."""
    q = 1.0 / 8.0
    q = 1.0 / 7.0 + u * q
    q = 1.0 / 6.0 + u * q
    q = 1.0 / 5.0 + u * q
    q = 1.0 / 4.0 + u * q
    q = 1.0 / 3.0 + u * q
    q = 1.0 / 2.0 + u * q
    q = 1.0 + u * q
    series = -u * q
    direct = tl.log(tl.maximum(1.0 - u, 5.960464477539063e-08))
    return tl.where(u < 0.25, series, direct)


@triton.jit
def noise(h, gidx):
    """The Gumbel noise ``-log(-log(1 - u))`` (fp32) of row state ``h`` (:func:`row_key`)
    at global columns ``gidx``: murmur3's last block and finaliser, the uniform from the
    hash's two 16-bit halves."""
    a = _mix(h, gidx.to(tl.uint32)) ^ 16
    a = (a ^ (a >> 16)) * tl.full((), F1, tl.uint32)
    a = (a ^ (a >> 13)) * tl.full((), F2, tl.uint32)
    a = a ^ (a >> 16)
    hi = (a >> 16).to(tl.int32).to(tl.float32)
    lo = (a & 0xFFFF).to(tl.int32).to(tl.float32)
    u = hi * 1.52587890625e-05 + (lo + 0.5) * 2.3283064365386963e-10
    return -tl.log(-_log1p_neg(u))


@triton.jit
def divisor(t):
    """The temperature as :func:`scale`'s divisor: ``T``, with 0 (a greedy row) read as 1."""
    return tl.where(t == 0.0, 1.0, t)


@triton.jit
def scale(x, d):
    """``s = x / d`` (``d``: :func:`divisor`), Triton's fp32 division, skipped at ``d == 1``.
    The kernels assume it is monotone in ``x`` (maxima and bounds of ``x`` map to ``s``)."""
    return tl.where(d == 1.0, x, x / d)


@triton.jit
def scores(x, d, h, gidx):
    """``(s, g)``: ``s = x / T`` (:func:`scale`) and the Gumbel score ``g = s + noise``."""
    s = scale(x, d)
    return s, s + noise(h, gidx)


@triton.jit(do_not_specialize=["col0"])
def scores_kernel(x_ptr, x_stride, t_ptr, seed_ptr, s_ptr, g_ptr, N, col0, BLOCK: tl.constexpr):
    """The exact path's elementwise pass on a fused sampler: ``s = x / T`` and ``g = s +
    noise`` (:func:`scores`), fp32 ``[M, N]`` contiguous outputs, global columns from
    ``col0``: a row that falls back draws the fused kernels' bits."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    s, g = scores(x, divisor(tl.load(t_ptr + row)), row_key(seed_ptr, row), cols + col0)
    tl.store(s_ptr + row * N + cols, s, mask=mask)
    tl.store(g_ptr + row * N + cols, g, mask=mask)


@triton.jit
def radix_bits(x, BITS: tl.constexpr):
    """Order-preserving unsigned keys (uint32) of ``x`` (fp32 holding the input's
    values) in ``[0, 2**BITS)``: the top ``BITS`` bits of ``ordered32(x) + 2**31``.
    ``BITS = 16`` is exact (equal keys iff equal values) only for bfloat16 inputs."""
    u = ordered32(x).to(tl.uint32, bitcast=True) ^ 0x80000000
    return u >> (32 - BITS)


@triton.jit
def kth_largest(u, valid, k, BITS: tl.constexpr):
    """The ``k``-th largest (with multiplicity) of the valid ``u`` (uint32 in
    ``[0, 2**BITS)``, 1-D), ``1 <= k <= count(valid)``: a radix select, 8 bits per
    round, one block-wide histogram each (``BITS // 8`` rounds)."""
    prefix = tl.zeros((), tl.uint32)
    rem = k
    bins = tl.arange(0, 256)
    for r in tl.static_range(BITS // 8):
        shift = BITS - 8 * (r + 1)
        if r == 0:
            match = valid
        else:
            match = valid & ((u >> (shift + 8)) == prefix)
        # Barriers around the histogram: its shared-memory counts must not overlap the
        # reductions before and after it (a guard; see the README's GPU-test notes).
        tl.debug_barrier()
        hist = tl.histogram(((u >> shift) & 255).to(tl.int32), 256, match)
        tl.debug_barrier()
        ge = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist  # count of digits >= each bin
        digit = tl.sum((ge >= rem).to(tl.int32), 0) - 1
        rem -= tl.sum(tl.where(bins == digit, ge - hist, 0), 0)
        prefix = prefix * 256 + digit.to(tl.uint32)
    return prefix


@triton.jit
def kth_largest_in(u, valid, k, rounds):
    """:func:`kth_largest` of int64 keys ``u`` in ``[0, 2**(8 * rounds))`` for a runtime
    ``rounds`` (1..4): one copy of the code serves keys of either width."""
    prefix = tl.zeros((), tl.int64)
    rem = k
    bins = tl.arange(0, 256)
    r = 0
    while r < rounds:  # a while loop: the interpreter cannot range over a tensor
        shift = 8 * (rounds - 1 - r)
        match = valid & ((u >> (shift + 8)) == prefix)  # round 0: every key (u >> 8 * rounds)
        tl.debug_barrier()  # as in kth_largest
        hist = tl.histogram(((u >> shift) & 255).to(tl.int32), 256, match)
        tl.debug_barrier()
        ge = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist
        digit = tl.sum((ge >= rem).to(tl.int32), 0) - 1
        rem -= tl.sum(tl.where(bins == digit, ge - hist, 0), 0)
        prefix = prefix * 256 + digit.to(tl.int64)
        r += 1
    return prefix


@triton.jit
def top_select(h, u, valid, k, BITS: tl.constexpr):
    """The ``k`` largest keys of a 1-D block, ordered by ``h`` (:func:`ordered32` values),
    ties by position (the column): returns ``(selected, slot, v, overflow)`` with slots
    ``0..`` in column order (every valid element when fewer than ``k``), ``v`` the
    K-th value, and ``overflow`` when elements equal to ``v`` were left out. ``u`` are
    radix keys ordered like ``h`` whose equality implies ``h``'s (:func:`radix_bits`)."""
    kk = tl.minimum(k, tl.sum(valid.to(tl.int32), 0))
    uk = kth_largest(u, valid, tl.maximum(kk, 1), BITS)
    v = tl.max(tl.where(valid & (u == uk), h, -0x7FFFFFFF - 1), 0)
    gt = valid & (h > v)
    eq = valid & (h == v)
    need = kk - tl.sum(gt.to(tl.int32), 0)
    sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= need))
    return sel, tl.cumsum(sel.to(tl.int32), 0) - 1, v, tl.sum(eq.to(tl.int32), 0) > need
