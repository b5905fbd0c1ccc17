"""Test kernels over the fused path's device functions
(:mod:`logits_gather.sampling.kernels.noise`): the Gumbel scores alone, and min-p's ``log``
alone. Needs Triton; import it only where Triton imports."""

from __future__ import annotations

import triton
import triton.language as tl

from logits_gather.sampling.kernels.noise import divisor, row_key, scores


@triton.jit
def noise_kernel(seed_ptr, pos_ptr, t_ptr, x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """``out[row, j] = x / T + noise`` for global columns ``j`` (fp32; ``seed_ptr``,
    ``pos_ptr`` int64 ``[M]``), in the fused kernels' arithmetic."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    _, g = scores(x, divisor(tl.load(t_ptr + row)), row_key(seed_ptr, pos_ptr, row), cols)
    tl.store(out_ptr + row * N + cols, g, mask=mask)


@triton.jit
def log_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out = log(x)`` (fp32, ``n`` elements) as the min-p kernels take ``log(min_p)``
    (``tl.log``, as vLLM's min-p kernel)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    tl.store(out_ptr + i, tl.log(tl.load(x_ptr + i, mask=mask, other=1.0)), mask=mask)
