"""The per-row top-k's last step in one kernel (imported lazily: needs Triton).

With ``top_p``, :func:`.topp.sample_rows_k` runs the fused top-k and the top-p path on
every call, then keeps, per row, the top-k token where ``1 <= k <= 64`` and the other
one elsewhere, and flags rows that neither serves (``64 < k < V``) for the exact
fallback, or-ed into top-p's flag (``OR``; without it, the flag is set alone). As torch
ops that was about a dozen small kernels per eager call; here it is one. (Without
``top_p``, top-k's own launches serve every row: :mod:`.rowk`.)
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M", "V"])
def pick_rows_k(
    k_ptr, topk_ptr, other_ptr, out_ptr, need_ptr, M, V, KMAX: tl.constexpr,
    BLOCK: tl.constexpr, OR: tl.constexpr,
):  # fmt: skip
    """One program: ``out = topk`` where ``1 <= k <= KMAX``, else ``other`` (``k`` int64
    ``[M]``, values >= 0); ``need`` (bool ``[1]``) set to whether some row has ``KMAX < k
    < V``, or with ``OR`` or-ed into it. ``out`` may be ``topk``."""
    bad = tl.zeros([BLOCK], tl.int32)
    start = 0
    while start < M:
        i = start + tl.arange(0, BLOCK)
        on = i < M
        k = tl.load(k_ptr + i, mask=on, other=0)
        fast = (k >= 1) & (k <= KMAX)
        served = fast | (k == 0) | (k >= V)
        mine = tl.load(topk_ptr + i, mask=on & fast, other=0)
        theirs = tl.load(other_ptr + i, mask=on & ~fast, other=0)
        tl.store(out_ptr + i, tl.where(fast, mine, theirs), mask=on)
        bad = bad | (on & ~served).to(tl.int32)
        start += BLOCK
    unserved = tl.max(bad, 0)
    if OR:
        unserved = unserved | tl.load(need_ptr).to(tl.int32)
    tl.store(need_ptr, unserved != 0)


__all__ = ["pick_rows_k"]
