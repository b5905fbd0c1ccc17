"""The filter rows of the fused calls, and the calls that need a cut over the whole
row: top-p, and a top-k of more than 64 or one per row.

Those run top-p's candidate rounds (:meth:`.fused.Fused.topp_rounds`), then top-p's
in-kernel exact fallback (:mod:`..kernels.topp_exact`) for the rows the rounds left undecided:
no host sync and no torch-ops fallback, so CUDA graphs capture them like the other fused
calls. A per-row ``top_k`` without top-p takes top-k's launches (rows with ``k`` over 64
are left to the fallback); with top-p it takes top-p's, as does an int ``top_k`` over 64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..exact import ops
from ..exact.filters import rows

if TYPE_CHECKING:
    from ..state import State
    from .fused import Fused

Filter = float | int | torch.Tensor | None
"""A filter as :mod:`..checks` returns it: None, a scalar or an ``[M, 1]`` tensor."""


FILLED_MOST = 32
"""Scalar filter values a sampler keeps filled rows of (:func:`filled`)."""


def filled(state: State, value: Filter, m: int, dtype: torch.dtype) -> torch.Tensor | None:
    """:func:`rows` for the fused kernels: None, an ``[M, 1]`` tensor as is, or a scalar
    as ``[M, 1]`` rows of it. Calls take scalars' rows from a per-sampler cache
    (:class:`..state.State`; a view: the kernels only read them), so that a scalar
    ``top_p`` or ``min_p`` costs no fill kernel per call. A captured call reads the cached
    rows when an eager call made them (the warm-up before capture), and the sampler then
    holds them for good (``state.held``), as a graph must not read a tensor that the cache
    later drops; otherwise it fills its own rows in the graph. One H100, world size 1, V=151552,
    bf16 ``randn * 3`` logits, T=0.8, graph replay, µs at M = 1 / 4 / 16 / 64 / 256, rows filled
    in the graph against cached: top_p=0.9 26.7 / 29.4 / 36.9 / 75.8 / 294.2 against 26.4 /
    28.4 / 36.9 / 74.8 / 292.6; min_p=0.05 8.4 / 10.2 / 17.8 / 49.9 / 183.2 against 7.5 /
    9.4 / 16.7 / 49.0 / 182.3."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    dev = state.device
    key = (value, dtype)
    out = state.filled.get(key)
    if ops.capturing(dev):
        if out is None or out.shape[0] < m:
            return rows(value, m, dtype, dev)
        if not any(out is kept for kept in state.held):
            state.held.append(out)
        return out[:m]
    if out is None or out.shape[0] < m:
        if len(state.filled) >= FILLED_MOST:
            state.filled.clear()
        state.filled[key] = out = rows(value, max(m, state.capacity), dtype, dev)
    return out[:m]


def filter_rows(
    state: State, p: Filter, mp: Filter, m: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(pv, mpv)`` for the fused kernels (:func:`filled`, as ``[M]``): ``p`` float64 (a
    tensor may be float32) and ``mp`` fp32 (the kernels take min-p's log themselves, with
    libdevice's ``log``: ``torch.log``'s bits, scripts/min-p-log-check.py); each None
    where its filter is."""
    p_rows = filled(state, p, m, torch.float64)
    mp_rows = filled(state, mp, m, torch.float32)
    return _flat(p_rows, m), _flat(mp_rows, m)


def _flat(rows_: torch.Tensor | None, m: int) -> torch.Tensor | None:
    return None if rows_ is None else rows_.view(m)


def sample(
    state: State,
    fused: Fused,
    shard: torch.Tensor,
    t: torch.Tensor,
    rows_: tuple[torch.Tensor, torch.Tensor],
    k: int | torch.Tensor | None,
    p: float | torch.Tensor | None,
    mp: float | torch.Tensor | None,
) -> torch.Tensor:
    """Tokens of the fused path's cut calls: ``t`` fp32 ``[M, 1]``; ``rows_`` the seeds and
    positions (int64 ``[M]`` each); ``k`` None, an int or int64 ``[M, 1]`` (>= 0); ``p``
    None, a float < 1 or float64 / float32 ``[M, 1]``; ``mp`` None, a float > 0 or fp32
    ``[M, 1]``; ``k`` or ``p`` not None."""
    m = shard.shape[0]
    if isinstance(k, torch.Tensor) and p is None:  # top-k's launches, then the rest
        mpv = filter_rows(state, None, mp, m)[1]
        return fused.sample_topk(shard, t.view(m), rows_, k.view(m), None, mpv, plain=True)
    p = 1.0 if p is None else p
    pv, mpv = filter_rows(state, p, mp, m)
    kv = None if k is None else filled(state, k, m, torch.int64).view(m)
    out, _, second, exact = fused.topp_rounds(shard, t.view(m), rows_, pv, mpv, kv)
    if m > fused.round_two_rows:
        second()
    exact()
    return out
