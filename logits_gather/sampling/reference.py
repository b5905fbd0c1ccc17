"""The definitions, written on the gathered ``[M, V]`` logits with plain torch ops.

These are what the vocab-parallel operations reproduce (``greedy`` and
``sample`` exactly, ``logprobs`` within the stated tolerance), and what the
benchmark runs after gathering the logits. ``sample`` is the tp=1 procedure:
the same noise (:mod:`.rng`) for every column, the same top-k rule, one argmax.
"""

from __future__ import annotations

import torch

from . import rng
from .sampler import Logprobs


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(1)


def sample(logits: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor,
           top_k: int | None = None) -> torch.Tensor:
    """``argmax(where(keep, x / T + G, -inf))`` with ``keep = x >= k-th largest x``;
    rows with ``T == 0`` or with a NaN logit give ``argmax(x)``.

    ``temperature`` and ``seed`` are ``[M]`` (converted to fp32 and int64),
    on the logits' device.
    """
    xf = logits.to(torch.float32)
    t = temperature.to(torch.float32)[:, None]
    counters = rng.column_counters(0, logits.shape[1], logits.device)
    scores = rng.perturbed(xf, torch.where(t > 0, t, 1.0), rng.row_keys(seed), counters)
    if top_k is not None:
        kth = xf.topk(top_k, 1).values[:, -1:]
        scores = torch.where(xf >= kth, scores, float("-inf"))
    use_greedy = xf.isnan().any(1) | (t[:, 0] == 0)
    return torch.where(use_greedy, xf.argmax(1), scores.argmax(1))


def logprobs(logits: torch.Tensor, token_ids: torch.Tensor, top_n: int = 0) -> Logprobs:
    """``log_softmax`` in fp32 at ``token_ids``; top-n by (logit desc, id asc), NaN first."""
    xf = logits.to(torch.float32)
    lp = torch.log_softmax(xf, 1)
    token = lp.gather(1, token_ids[:, None].long())[:, 0]
    if top_n:
        top = torch.sort(xf, dim=1, descending=True, stable=True).indices[:, :top_n]
    else:
        top = torch.empty(xf.shape[0], 0, dtype=torch.int64, device=xf.device)
    return Logprobs(token, top, lp.gather(1, top))


__all__ = ["greedy", "logprobs", "sample"]
