"""vLLM 0.33's Gumbel score ``x / T + noise`` built from its own Triton functions, as its
``gumbel_noised_argmax`` composes them (divide, draw, add), for bit comparisons with the
fused kernels' arithmetic. Imports vLLM's packed files: import it only where they import.
(A module of its own because ``@triton.jit`` resolves the functions it calls as globals.)
"""

from __future__ import annotations

import triton
import triton.language as tl
from vllm.v1.worker.gpu.sample.gumbel import _log1p_neg_stable, murmur3_uniform32


@triton.jit
def vllm_scores(x_ptr, t_ptr, seed_ptr, pos_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """``out[row, j] = x / T + noise(seed, position, j)`` in fp32, vLLM's way."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    x = x / tl.load(t_ptr + row)
    u = murmur3_uniform32(tl.load(seed_ptr + row), tl.load(pos_ptr + row), cols)
    tl.store(out_ptr + row * N + cols, x + -tl.log(-_log1p_neg_stable(u)), mask=mask)
