"""The fused path's elementwise kernels over ``[M, N]`` (imported lazily: needs Triton):
the filter path's scores, and the noise alone for tests. Both are bit-identical to
:func:`.rng.perturbed` on the same columns. Also min-p's ``log`` alone, for tests."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from .keys import inv_t, row_key, scores


@triton.jit
def noise_kernel(seed_ptr, t_ptr, x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Test helper: ``out[row, j] = x * (1 / T) - log(-log(u))`` for global columns ``j`` (fp32)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    _, g = scores(x, inv_t(tl.load(t_ptr + row)), row_key(tl.load(seed_ptr + row)), cols)
    tl.store(out_ptr + row * N + cols, g, mask=mask)


@triton.jit(do_not_specialize=["col0"])
def scores_kernel(x_ptr, x_stride, t_ptr, seed_ptr, s_ptr, g_ptr, N, col0, BLOCK: tl.constexpr):
    """The filter path's elementwise pass: ``s = x * (1 / T)`` and ``g = s - log(-log(u))``
    (``T`` 0 read as 1), fp32 ``[M, N]`` contiguous outputs, global columns from ``col0``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = inv_t(tl.load(t_ptr + row))
    s, g = scores(x, r, row_key(tl.load(seed_ptr + row)), cols + col0)
    tl.store(s_ptr + row * N + cols, s, mask=mask)
    tl.store(g_ptr + row * N + cols, g, mask=mask)


@triton.jit
def log_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Test helper: ``out = log(x)`` (fp32, ``n`` elements) as the min-p kernels take
    ``log(min_p)``: libdevice's, which must equal ``torch.log``'s bits."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    tl.store(out_ptr + i, libdevice.log(tl.load(x_ptr + i, mask=mask, other=1.0)), mask=mask)


__all__ = ["log_kernel", "noise_kernel", "scores_kernel"]
