"""The definitions, written on the gathered ``[M, V]`` logits with plain torch ops.

``sample`` is vLLM 0.33's V2 sampling (its ``apply_temperature``, ``apply_min_p``
and ``gumbel_sample``), transcribed with the same fp32 operations in the same order,
plus an exact top-k/top-p kept set of our own. The vocab-parallel operations
reproduce ``greedy`` and ``sample`` exactly on the same device, and ``logprobs``
within the stated tolerance.

``sample(logits, temperature, seed, positions, top_k=, top_p=, min_p=)``, per row
(``x`` the row as fp32, ``T`` its temperature, ``j`` the global token id):

1. ``s_j = x_j / T`` (IEEE fp32 division, :func:`.rng.scaled`); ``s = x`` when
   ``T == 0`` or ``T == 1``. ``s_max = max_j s_j``.
2. Noise ``n_j`` = vLLM's Gumbel noise keyed by ``(seed, position, j)`` (:mod:`.rng`).
3. The kept set ``K``, filters in vLLM's order (each off at its disabling value):
   - min-p (``0.0`` off): drop ``j`` iff ``s_j < s_max + log(min_p)`` (fp32 add,
     ``torch.log``); a NaN threshold drops nothing;
   - top-k (``0`` off; ``k >= V`` keeps all): keep ``j`` iff ``s_j >=`` the k-th
     largest ``s`` of the row; every element equal to the cut value is kept (more
     than k tokens on ties). min-p keeps an upper set of ``s``, so this equals the
     k-th largest of what min-p kept whenever that holds k or more;
   - top-p (``1.0`` off): masses ``q_j = floor(exp(s_j - s_max) * 2**40)`` as
     int64 (exact integers: sums are order-independent, the same at any tp);
     ``Z = sum of q over K``; ``thr = min(Z, max(1, ceil(float64(Z) * float64(p))))``;
     ``tau`` = the largest ``s_j`` (``j`` in ``K``) with ``sum(q_i : i in K,
     s_i >= s_j) >= thr``; keep ``K ∩ {s_j >= tau}``. A run of equal ``s`` at
     the cut is kept whole. (The clamp to ``[1, Z]``: ``float64(Z)`` rounds when
     ``Z > 2**53`` and could exceed ``Z`` at ``p`` near 1, leaving no ``tau``.)
     Elements whose mass rounds to ``q = 0`` (``p_j < 2**-40 p_max``) only stay
     when the cut falls below them, which needs ``p`` within about ``1e-7`` of 1.
   - top-k and top-p are off in a row whose ``s_max`` is not finite (a NaN, an
     ``inf`` or all ``-inf``). The row's maximum always survives every filter.
4. ``T == 0``: the token is ``argmax(x)`` of the raw logits (no noise, the lowest id
   among equal maxima, the first NaN). Otherwise it is the lowest id among the maxima
   of ``s_j + n_j`` over ``K`` (the first NaN if one is kept).

Without filters this is vLLM's Gumbel-max draw from ``softmax(x / T)``.
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
    """``tau`` ``[M, 1]`` of the definition above (``p`` float64 ``[M, 1]``; rows with a
    non-finite ``smax`` give an unspecified ``tau``)."""
    q = torch.floor(torch.exp(s - smax) * MASS_SCALE).nan_to_num_(0.0).to(torch.int64)
    q = torch.where(keep, q, 0)
    z = q.sum(1, keepdim=True)
    thr = torch.ceil(z.double() * p).to(torch.int64).clamp(min=1)
    thr = torch.minimum(thr, z)
    order = torch.sort(s, dim=1, descending=True, stable=True)
    cum = q.gather(1, order.indices).cumsum(1)
    first = (cum < thr).sum(1, keepdim=True).clamp_(max=s.shape[1] - 1)
    return order.values.gather(1, first)


def kept(s: torch.Tensor, top_k=None, top_p=None, min_p=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept set ``K`` (bool ``[M, V]``) of step 3 for scores ``s`` (fp32), and
    ``s_max`` ``[M, 1]``."""
    m, v = s.shape
    dev = s.device
    smax = s.amax(1, keepdim=True)
    keep = torch.ones_like(s, dtype=torch.bool)
    off = ~torch.isfinite(smax)  # top-k and top-p are off in these rows
    if min_p is not None:
        mp = _row(min_p, m, torch.float32, dev)
        keep &= ~(s < smax + torch.log(mp)) | (mp == 0)
    if top_k is not None:
        k = _row(top_k, m, torch.int64, dev)
        k = torch.where(k > 0, k, v).clamp(1, v)
        kth = torch.sort(s, 1, descending=True).values.gather(1, k - 1)
        keep &= (s >= kth) | off
    if top_p is not None:
        p = _row(top_p, m, torch.float64, dev)
        keep &= (s >= top_p_cut(s, smax, keep, p)) | (p >= 1) | off
    return keep, smax


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    top_k=None,
    top_p=None,
    min_p=None,
) -> torch.Tensor:
    """The definition above. ``temperature``/``seed``/``positions`` ``[M]`` (converted to
    fp32/int64; ``positions`` None means zeros); ``top_k``/``top_p``/``min_p`` None, a
    scalar or ``[M]``, on the logits' device."""
    m, v = logits.shape
    dev = logits.device
    t = temperature.to(device=dev, dtype=torch.float32).reshape(m, 1)
    seed = seed.to(device=dev, dtype=torch.int64)
    if positions is None:
        positions = torch.zeros(m, dtype=torch.int64, device=dev)
    ids = torch.arange(v, dtype=torch.int64, device=dev)
    s = rng.scaled(logits, t)
    keep, _ = kept(s, top_k, top_p, min_p)
    g = s + rng.gumbel(seed, positions.to(device=dev, dtype=torch.int64), ids)
    sampled = torch.where(keep, g, float("-inf")).argmax(1)
    return torch.where(t[:, 0] == 0, logits.argmax(1), sampled)


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


__all__ = ["MASS_SCALE", "greedy", "kept", "logprobs", "sample", "top_p_cut"]
