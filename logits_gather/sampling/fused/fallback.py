"""Fused sampling calls that may need the exact fallback (top-p; a per-row top-k), and
that fallback.

The kernels raise a device flag when some row's nucleus spills past both top-p rounds
(:mod:`..kernels.nucleus`), when a per-row ``top_k`` has ``64 < k < V`` without top-p, or,
with top-p, when the candidates cannot decide a row's top-k set. Then the exact torch-ops
path (:func:`..exact.filters.sample`) recomputes every row. Every rank sees the same flag
(the final kernels reduce the same words), so every rank takes the same branch and the
fallback's collective exchanges stay matched.

- Eager: one host sync per call reads the flags (``need``; and for top-p ``more``, some
  row is left to round 2, which is skipped otherwise).
- CUDA graph capture: these calls take the exact torch-ops path alone (capturable, no
  host sync, exact, but far slower than the fused kernels; logged once). A graph cannot
  branch on the flag without conditional nodes, which torch's ``CUDAGraph`` lacks.

A sampler's first eager call of each kind runs the fallback whatever the flag says, so its
kernels are compiled and loaded before a capture needs them (every eager call builds
the fallback's exchanges for its row count: capture cannot build them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from ..exact import filters, ops

log = logging.getLogger(__name__)
_warned: list[bool] = []


def _prepare(sampler: Any, m: int) -> None:
    """Builds the fallback's exchanges (collective: every rank makes the same calls)."""
    for width in (ops.GREEDY_WIDTH, filters.RADIX_WIDTH, ops.BEST_WIDTH):
        sampler.exchange_for(width, m)


def _captured(kind: str, sampler: Any, call: tuple) -> torch.Tensor:
    """A call of ``kind`` under CUDA graph capture: the exact torch-ops path alone."""
    if not _warned:
        _warned.append(True)
        log.warning(
            "logits_gather.sampling: %s under CUDA graph capture takes the exact torch-ops "
            "path (exact, but far slower than the fused kernels): graphs cannot skip the "
            "fallback; greedy, temperature, min-p and an int top_k <= 64 stay fused",
            kind,
        )
    return filters.sample(sampler, *call)


def rows(value: Any, m: int, dtype: torch.dtype, dev: torch.device) -> Any:
    """None, or a filter's scalar or ``[M, 1]`` tensor as ``[M, 1]`` of ``dtype``."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    return torch.full((m, 1), value, dtype=dtype, device=dev)


FILLED_MOST = 32
"""Scalar filter values a sampler keeps filled rows of (:func:`filled`)."""


def filled(sampler: Any, value: Any, m: int, dtype: torch.dtype) -> Any:
    """:func:`rows` for the fused kernels: None, an ``[M, 1]`` tensor as is, or a scalar
    as ``[M, 1]`` rows of it. Eager calls take scalars' rows from a per-sampler cache (a
    view: the kernels only read them), so that a scalar ``top_p`` or ``min_p`` costs no
    fill kernel per call. Captured calls fill their own, as graphs must not read a cached
    tensor that a later call may drop."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    dev = sampler.device
    if ops.capturing(dev):
        return rows(value, m, dtype, dev)
    key = (value, dtype)
    out = sampler.filled.get(key)
    if out is None or out.shape[0] < m:
        if len(sampler.filled) >= FILLED_MOST:
            sampler.filled.clear()
        sampler.filled[key] = out = rows(value, max(m, sampler.capacity), dtype, dev)
    return out[:m]


def filter_rows(sampler: Any, p: Any, mp: Any, m: int) -> tuple[Any, Any, Any, Any]:
    """``(p, mp, pv, mpv)`` for the fused kernels (:func:`filled`): ``p`` float64 (a
    tensor may be float32) and ``mp`` fp32 ``[M, 1]`` (the fallback's), ``pv`` and ``mpv``
    the same as ``[M]`` (the kernels take min-p's log themselves, with libdevice's
    ``log``: ``torch.log``'s bits, scripts/min-p-log-check.py); each None where its
    filter is."""
    p = filled(sampler, p, m, torch.float64)
    mp = filled(sampler, mp, m, torch.float32)
    return p, mp, _flat(p, m), _flat(mp, m)


def _flat(rows_: Any, m: int) -> Any:
    return None if rows_ is None else rows_.view(m)


def sample(
    sampler: Any,
    shard: torch.Tensor,
    t: torch.Tensor,
    draw: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    p: float | torch.Tensor,
    mp: float | torch.Tensor | None,
) -> torch.Tensor:
    """``t`` fp32 ``[M, 1]``; ``draw``: seeds and positions (int64 ``[M]``) and the two as
    int64 ``[M, 2]`` rows (the kernels'); ``p`` a float < 1 or float64 / float32 ``[M, 1]``;
    ``mp`` None, a float > 0 or fp32 ``[M, 1]``."""
    m = shard.shape[0]
    p, mp, pv, mpv = filter_rows(sampler, p, mp, m)
    call = (shard, t, draw[0], draw[1], None, p, mp)
    if ops.capturing(sampler.device):
        return _captured("top_p", sampler, call)
    out, flags, second = sampler.fused.topp_rounds(shard, t.view(m), draw[2], pv, mpv)
    return _finish(sampler, "top_p", call, out, flags, second)


def sample_rows_k(
    sampler: Any,
    shard: torch.Tensor,
    t: torch.Tensor,
    draw: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    k: torch.Tensor,
    p: float | torch.Tensor | None,
    mp: float | torch.Tensor | None,
) -> torch.Tensor:
    """A per-row ``top_k`` (int64 ``[M, 1]``, values >= 0) with the other filters: without
    top-p in top-k's launches (rows with ``64 < k < V`` set the flag), with top-p in
    top-p's (undecided rows set it); the fallback then recomputes the call."""
    m, fused = shard.shape[0], sampler.fused
    p, mp, pv, mpv = filter_rows(sampler, p, mp, m)
    kv = k.view(m)  # contiguous: checks.top_k
    call = (shard, t, draw[0], draw[1], k, p, mp)
    if ops.capturing(sampler.device):
        return _captured("a per-row top_k", sampler, call)
    if pv is None:
        need = torch.empty(1, dtype=torch.bool, device=sampler.device)  # set by rowk_local
        out = fused.sample_topk(shard, t.view(m), draw[2], kv, None, mpv, need)
        return _finish(sampler, "top_k rows", call, out, need)
    out, flags, second = fused.topp_rounds(shard, t.view(m), draw[2], pv, mpv, kv)
    return _finish(sampler, "top_k rows, top_p", call, out, flags, second)


def _finish(
    sampler: Any,
    kind: str,
    call: tuple,
    out: torch.Tensor,
    need: torch.Tensor,
    second: Callable[[], None] | None = None,
) -> torch.Tensor:
    """``out``, recomputed by the exact fallback (``filters.sample(sampler, *call)``) when
    ``need`` (bool ``[1]``) says so, and on a sampler's first eager call of each ``kind``.
    With ``second`` (top-p's round 2, :meth:`.rounds.Fused.topp_rounds`), ``need`` is bool
    ``[2]``: ``need``, then ``more``, and round 2 runs only when ``more`` (one host sync
    reads both flags)."""
    flag = need[:1]

    def fallback() -> None:
        out.copy_(filters.sample(sampler, *call))

    _prepare(sampler, call[0].shape[0])
    if kind not in sampler.fallback_warm:  # compiles and loads everything once
        sampler.fallback_warm.add(kind)
        if second is not None:
            second()
        fallback()
    elif second is None:
        if bool(flag.item()):
            fallback()
    elif need.tolist()[1]:  # one host sync for both flags
        second()
        if bool(flag.item()):
            fallback()
    return out
