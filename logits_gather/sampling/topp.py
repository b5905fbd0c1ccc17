"""Top-p on the fused path, and its exact fallback, in eager mode and in CUDA graphs.

The fused kernels decide a row's nucleus from per-split candidates when they can
(:mod:`.nucleus`), else from every element at or above a level that round proves to
be at or below the cut (:mod:`.spill`), and raise a device flag when some row's
nucleus spills past both. Then the exact torch-ops path (:func:`.filters.sample`, the definition's radix selects
over the shards) recomputes every row. Every rank sees the same flag (the final
kernels reduce the same words), so every rank takes the same branch and the fallback's
collective exchanges stay matched.

- Eager: one host sync per call reads the flag (the fused kernels' result is needed
  to know whether the fallback runs).
- CUDA graph capture: the fallback is captured into a conditional (IF) node on the
  flag, so replays run it only when needed, without a host sync (:mod:`.conditional`,
  through the driver API: torch 2.11's ``CUDAGraph`` has no IF nodes; CUDA >= 12.4).
  Without them, the fallback is captured unconditionally (exact, about 1.4 ms per
  replay at M=64; logged once).

A sampler's first eager top-p call runs the fallback whatever the flag says, so its
kernels are compiled and loaded before a capture needs them (every eager call builds
the fallback's exchanges for its row count: capture cannot build them).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from . import conditional, exchange, filters, ops, select

log = logging.getLogger(__name__)
_warned: list[bool] = []


def _prepare(sampler: Any, m: int) -> None:
    """Builds the fallback's exchanges (collective: every rank makes the same calls) and,
    once, this rank's IF-node builder (outside any capture: it compiles a kernel)."""
    for width in (ops.GREEDY_WIDTH, select.WIDTH, ops.BEST_WIDTH):
        sampler._exchange(width, m)
    if sampler._topp_if is None:
        why = conditional.Conditional.problem(sampler.device)
        if why is None:
            try:
                sampler._topp_if = conditional.Conditional(sampler.device)
            except Exception as exc:  # noqa: BLE001 - graphs then run the fallback always
                why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            sampler._topp_if = False
            log.info("logits_gather.sampling: no CUDA graph IF nodes for top-p: %s", why)


def sample(
    sampler: Any,
    shard: torch.Tensor,
    t: torch.Tensor,
    seeds: torch.Tensor,
    p: float | torch.Tensor,
    mp: float | torch.Tensor | None,
) -> torch.Tensor:
    """``t`` fp32 ``[M, 1]``; ``p`` a float < 1 or float64 ``[M, 1]``; ``mp`` None, a
    float > 0 or fp32 ``[M, 1]``."""
    m, dev = shard.shape[0], sampler.device
    if not isinstance(p, torch.Tensor):
        p = torch.full((m, 1), p, dtype=torch.float64, device=dev)
    if mp is not None and not isinstance(mp, torch.Tensor):
        mp = torch.full((m, 1), mp, dtype=torch.float32, device=dev)
    logmp = None if mp is None else torch.log(mp).view(m)
    out, need = sampler._fused.sample_topp(shard, t.view(m), seeds, p.view(m), logmp)

    def fallback() -> None:
        out.copy_(filters.sample(sampler, shard, t, seeds, None, p, mp))

    if not exchange._capturing(dev):
        _prepare(sampler, m)
        if not sampler._topp_warm or bool(need.item()):
            sampler._topp_warm = True
            fallback()
        return out
    if sampler._topp_if:
        sampler._topp_if.capture_if(need, fallback)
        return out
    if not _warned:
        _warned.append(True)
        log.warning(
            "logits_gather.sampling: top-p under a CUDA graph capture without "
            "conditional nodes (see the log at INFO, or no eager call before the "
            "capture): the exact fallback runs every replay"
        )
    fallback()
    return out


__all__ = ["sample"]
