"""vLLM 0.33's Gumbel scores as its V2 ``Sampler`` composes them, for bit comparisons
with the fused kernels' arithmetic. Imports vLLM's packed files: import it only where
they import. (A module of its own because ``@triton.jit`` resolves the functions it
calls as globals.)

vLLM's ``Sampler.sample`` copies the logits to fp32, divides them in place with its own
``apply_temperature`` kernel (skipped at T = 0 and 1), and then calls ``gumbel_sample``
with ``apply_temperature=False``, which adds the noise to the stored quotient. So the
quotient is rounded to fp32 before the add. :func:`vllm_noised` is that add, from
vLLM's own noise functions; :func:`scores` runs vLLM's ``apply_temperature`` first.

``gumbel_noised_argmax`` with its default ``APPLY_TEMPERATURE=True`` (vLLM's drafting
path) divides inside the same kernel as the add instead. Measured on the H200 with
Triton 3.6 (V=151552, 64 rows, bf16): Triton's ``x / T`` is ``div.full.f32`` in both
compositions and the quotient alone is bit-equal to ours (0 of 9,699,328 differ), but
dividing and adding in one kernel gives other scores in 2,561,263 of them. That is not
what the sampler draws from, so it is not the oracle here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from vllm.v1.worker.gpu.sample.gumbel import (
    _log1p_neg_stable,
    apply_temperature,
    murmur3_uniform32,
)


@triton.jit
def vllm_noised(s_ptr, seed_ptr, pos_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """``out[row, j] = s + noise(seed, position, j)`` in fp32, as ``gumbel_noised_argmax``
    adds it with ``APPLY_TEMPERATURE=False``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    s = tl.load(s_ptr + row * N + cols, mask=mask, other=0.0)
    u = murmur3_uniform32(tl.load(seed_ptr + row), tl.load(pos_ptr + row), cols)
    tl.store(out_ptr + row * N + cols, s + -tl.log(-_log1p_neg_stable(u)), mask=mask)


def scores(
    logits: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, pos: torch.Tensor
) -> torch.Tensor:
    """vLLM's fp32 Gumbel scores ``[M, V]`` of ``logits`` (any float dtype, ``[M, V]``)."""
    m, v = logits.shape
    s = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    idx = torch.arange(m, dtype=torch.int32, device=logits.device)
    apply_temperature(s, idx, temperature)
    out = torch.full_like(s, float("nan"))
    block = 1024
    vllm_noised[(m, triton.cdiv(v, block))](s, seed, pos, out, v, BLOCK=block)
    return out
