"""The fused kernels' block-wide top-K selection (``keys.top_select``) against torch (GPU).

Rows of 4096 values with heavy ties (few distinct values, runs, NaN, infinities),
every dtype, K from 1 to 64: the selected set must be exactly the K largest keys
(value descending, column ascending), the slots 0..K-1 in column order, the K-th
value right, and the overflow flag set iff elements equal to it were left out.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
BLOCK = 4096


def _kernel():
    import triton
    import triton.language as tl

    from logits_gather.sampling.kernels.keys import ordered32, radix_bits
    from logits_gather.sampling.kernels.radix import top_select

    @triton.jit
    def select_kernel(x_ptr, t_ptr, k_ptr, sel_ptr, slot_ptr, v_ptr, of_ptr, N,
                      BLOCK: tl.constexpr, BITS: tl.constexpr):  # fmt: skip
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * BLOCK + cols, mask=mask, other=float("-inf")).to(tl.float32)
        t = tl.load(t_ptr + row)
        s = tl.math.div_rn(x, t)
        sel, slot, v, overflow = top_select(
            ordered32(s), radix_bits(x, BITS), mask, tl.load(k_ptr + row), BITS
        )
        tl.store(sel_ptr + row * BLOCK + cols, sel.to(tl.int8))
        tl.store(slot_ptr + row * BLOCK + cols, slot)
        tl.store(v_ptr + row, v)
        tl.store(of_ptr + row, overflow.to(tl.int8))

    return select_kernel


def _rows(gen: torch.Generator, n: int, dev: torch.device) -> torch.Tensor:
    x = torch.randn(n, BLOCK, generator=gen, device=dev) * 3
    kinds = torch.arange(n, device=dev) % 6
    few = torch.randint(-4, 4, (n, BLOCK), generator=gen, device=dev).float()
    x = torch.where((kinds == 1)[:, None], few * 3, x)
    x = torch.where((kinds == 2)[:, None], few * 0.5, x)
    x = torch.where((kinds == 3)[:, None], torch.full_like(x, -2.0), x)
    x[kinds == 3, 17] = 6.0
    x[kinds == 4, 5] = float("nan")
    x[kinds == 4, 9] = float("inf")
    x[kinds == 5] = float("-inf")
    return x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_top_select_matches_torch(dtype: torch.dtype) -> None:
    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev).manual_seed(11)
    n = 96
    x = _rows(gen, n, dev).to(dtype)
    t = torch.tensor([0.6, 1.0, 1.7, 0.3, 2.5], device=dev).repeat(n // 5 + 1)[:n]
    k = torch.tensor([1, 2, 3, 7, 50, 64, 33], device=dev).repeat(n // 7 + 1)[:n]  # not % 6
    sel = torch.empty(n, BLOCK, dtype=torch.int8, device=dev)
    slot = torch.empty(n, BLOCK, dtype=torch.int32, device=dev)
    v = torch.empty(n, dtype=torch.int32, device=dev)
    of = torch.empty(n, dtype=torch.int8, device=dev)
    bits = 16 if dtype == torch.bfloat16 else 32
    for columns in (BLOCK, 3000):
        _kernel()[(n,)](x, t, k, sel, slot, v, of, columns, BLOCK=BLOCK, BITS=bits, num_warps=8)
        s = x[:, :columns].float() / t[:, None]
        bits32 = s.view(torch.int32).clone()
        bits32[s == 0] = 0
        bits32[s.isnan()] = 0x7FC00000
        h = torch.where(bits32 < 0, bits32 ^ 0x7FFFFFFF, bits32).long().cpu()
        keys = h * 2**32 + (2**32 - 1 - torch.arange(columns))
        for r in range(n):
            kk = int(k[r])
            order = keys[r].topk(kk).indices.sort().values.tolist()
            want = torch.zeros(BLOCK, dtype=torch.int8)
            want[order] = 1
            where = f"{dtype} columns={columns} row {r} k={kk}"
            assert torch.equal(sel[r].cpu(), want), where
            got_slots = slot[r].cpu()[want.bool()]
            assert torch.equal(got_slots, torch.arange(len(order), dtype=torch.int32)), where
            kth = int(h[r, order].min())
            assert int(v[r]) == kth, where
            ties_left = int((h[r] == kth).sum()) > sum(int(h[r, j]) == kth for j in order)
            assert bool(of[r]) == ties_left, where
