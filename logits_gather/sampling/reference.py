"""The definitions, written on the gathered ``[M, V]`` logits with plain torch ops.

These are what the vocab-parallel operations reproduce (``greedy`` and
``sample`` exactly, ``logprobs`` within the stated tolerance), and what the
benchmark runs after gathering the logits.

``sample(logits, temperature, seed, top_k, top_p, min_p)``, per row (all fp32
unless said otherwise; ``x`` the row as fp32, ``T`` its temperature):

1. ``s_j = x_j * r`` with ``r = 1 / T`` rounded once (IEEE fp32, :func:`.rng.scaled`;
   at most an ulp from ``x_j / T``, and ``x_j`` when ``T = 1``). Rows with ``T == 0``,
   or whose ``s_max = max_j s_j`` is not finite (a NaN, an ``inf``, all ``-inf``, an
   overflow, or ``r = inf``), give the greedy token ``argmax(x)`` (lowest id on ties,
   the first NaN).
2. Gumbel score ``g_j = s_j - log(-log(u_j))``, ``u_j`` from :mod:`.rng`, keyed
   by ``(seed, j)``.
3. The kept set ``K`` (each filter off at its disabling value):
   - min-p (``0.0`` off): keep ``j`` iff ``(s_j - s_max) >= log(min_p)``;
   - top-k (``0`` off; ``k >= V`` keeps all): keep ``j`` iff ``s_j >=`` the k-th
     largest ``s`` of the row; every element equal to the cut value is kept;
   - top-p (``1.0`` off): masses ``q_j = floor(exp(s_j - s_max) * 2**40)`` as
     int64 (exact integers: sums are order-independent, the same at any tp);
     ``Z = sum of q over K``; ``thr = min(Z, max(1, ceil(float64(Z) * float64(p))))``;
     ``tau`` = the largest ``s_j`` (``j`` in ``K``) with ``sum(q_i : i in K,
     s_i >= s_j) >= thr``; keep ``K ∩ {s_j >= tau}``. A run of equal ``s`` at
     the cut is kept whole. (The clamp to ``[1, Z]``: ``float64(Z)`` rounds when
     ``Z > 2**53`` and could exceed ``Z`` at ``p`` near 1, leaving no ``tau``.)
     Elements whose mass rounds to ``q = 0`` (``p_j < 2**-40 p_max``) only stay
     when the cut falls below them, which needs ``p`` within about ``1e-7`` of 1.
   min-p and top-k both keep an upper set of ``s``, so their order does not
   matter; top-p's mass is taken over what they kept (vLLM's order: temperature,
   then min-p and top-k, then top-p). The row's maximum is always kept.
4. The token is the lowest id among the maxima of ``g`` over ``K``.

Without filters this is plain Gumbel-max: a draw from ``softmax(x / T)``.
"""

from __future__ import annotations

import torch

from . import rng
from .sampler import Logprobs

MASS_SCALE = rng.MASS_SCALE


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(1)


def _row(value, m: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # torch.full for scalars: as_tensor would copy from the host (no CUDA graph capture).
    if not isinstance(value, torch.Tensor):
        return torch.full((m, 1), value, dtype=dtype, device=device)
    return value.to(device=device, dtype=dtype).expand(m).reshape(m, 1)


def top_p_cut(
    s: torch.Tensor, smax: torch.Tensor, keep: torch.Tensor, p: torch.Tensor
) -> torch.Tensor:
    """``tau`` ``[M, 1]`` of the definition above (``p`` float64 ``[M, 1]``)."""
    q = torch.floor(torch.exp(s - smax) * MASS_SCALE).to(torch.int64)
    q = torch.where(keep, q, 0)
    z = q.sum(1, keepdim=True)
    thr = torch.ceil(z.double() * p).to(torch.int64).clamp(min=1)
    thr = torch.minimum(thr, z)
    order = torch.sort(s, dim=1, descending=True, stable=True)
    cum = q.gather(1, order.indices).cumsum(1)
    first = (cum < thr).sum(1, keepdim=True).clamp_(max=s.shape[1] - 1)
    return order.values.gather(1, first)


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    top_k=None,
    top_p=None,
    min_p=None,
) -> torch.Tensor:
    """The definition above. ``temperature``/``seed`` ``[M]`` (converted to fp32/int64);
    ``top_k``/``top_p``/``min_p`` None, a scalar or ``[M]``, on the logits' device."""
    m, v = logits.shape
    dev = logits.device
    xf = logits.to(torch.float32)
    t = temperature.to(torch.float32)[:, None]
    s = rng.scaled(xf, t)
    g = s.sub(
        rng.neg_log_neg_log_uniform(rng.row_keys(seed.to(dev)), rng.column_counters(0, v, dev))
    )
    smax = s.amax(1, keepdim=True)
    keep = torch.ones_like(s, dtype=torch.bool)
    if min_p is not None:
        keep &= (s - smax) >= torch.log(_row(min_p, m, torch.float32, dev))
    if top_k is not None:
        k = _row(top_k, m, torch.int64, dev)
        k = torch.where(k > 0, k, v).clamp(1, v)
        kth = torch.sort(s, 1, descending=True).values.gather(1, k - 1)
        keep &= s >= kth
    if top_p is not None:
        p = _row(top_p, m, torch.float64, dev)
        keep &= (s >= top_p_cut(s, smax, keep, p)) | (p >= 1)
    sampled = torch.where(keep, g, float("-inf")).argmax(1)
    use_greedy = (t[:, 0] == 0) | ~torch.isfinite(smax[:, 0])
    return torch.where(use_greedy, xf.argmax(1), sampled)


def logprobs(logits: torch.Tensor, token_ids: torch.Tensor, top_n: int = 0) -> Logprobs:
    """``log_softmax`` in fp32 at ``token_ids``; top-n by (logit desc, id asc), NaN first
    (every NaN alike, ``-0.0`` equal to ``0.0``)."""
    xf = logits.to(torch.float32)
    lp = torch.log_softmax(xf, 1)
    token = lp.gather(1, token_ids[:, None].long())[:, 0]
    if top_n:
        # One NaN and one zero: a radix sort (CUDA's) orders NaN payloads and -0.0 apart.
        keyed = torch.where(xf.isnan(), float("nan"), xf + 0.0)
        top = torch.sort(keyed, dim=1, descending=True, stable=True).indices[:, :top_n]
    else:
        top = torch.empty(xf.shape[0], 0, dtype=torch.int64, device=xf.device)
    return Logprobs(token, top, lp.gather(1, top))


__all__ = ["MASS_SCALE", "greedy", "logprobs", "sample", "top_p_cut"]
