"""The fused path's elementwise kernels over ``[M, N]`` (imported lazily: needs Triton):
the filter path's scores, and the Gumbel scores alone for tests, in the fused kernels'
arithmetic (:mod:`.keys`: vLLM's bits on the GPU). Also min-p's ``log`` alone, for tests."""

from __future__ import annotations

import triton
import triton.language as tl

from .keys import divisor, row_key, scores


@triton.jit
def noise_kernel(seed_ptr, t_ptr, x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Test helper: ``out[row, j] = x / T + noise`` for global columns ``j`` (fp32; ``seed_ptr``
    int64 ``[M, 2]``: seed, position)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    _, g = scores(x, divisor(tl.load(t_ptr + row)), row_key(seed_ptr, row), cols)
    tl.store(out_ptr + row * N + cols, g, mask=mask)


@triton.jit(do_not_specialize=["col0"])
def scores_kernel(x_ptr, x_stride, t_ptr, seed_ptr, s_ptr, g_ptr, N, col0, BLOCK: tl.constexpr):
    """The filter path's elementwise pass: ``s = x / T`` and ``g = s + noise``
    (``T`` 0 and 1 skipped), fp32 ``[M, N]`` contiguous outputs, global columns from ``col0``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = divisor(tl.load(t_ptr + row))
    s, g = scores(x, r, row_key(seed_ptr, row), cols + col0)
    tl.store(s_ptr + row * N + cols, s, mask=mask)
    tl.store(g_ptr + row * N + cols, g, mask=mask)


@triton.jit
def log_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Test helper: ``out = log(x)`` (fp32, ``n`` elements) as the min-p kernels take
    ``log(min_p)`` (``tl.log``, as vLLM's min-p kernel)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    tl.store(out_ptr + i, tl.log(tl.load(x_ptr + i, mask=mask, other=1.0)), mask=mask)


__all__ = ["log_kernel", "noise_kernel", "scores_kernel"]
