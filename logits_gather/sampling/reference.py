"""The definitions, in plain torch on the gathered ``[M, V]`` logits; the shard paths
equal ``greedy`` (``torch.argmax``) and ``sample`` bit for bit on the same device, and
``logprobs`` within the tolerance :meth:`.VocabParallelSampler.logprobs` states.

``sample`` is vLLM 0.33's V2 sampling (``apply_temperature``, ``apply_min_p``,
``gumbel_sample``, ``vllm/v1/worker/gpu/sample/``), transcribed with the same fp32
operations in the same order, then an exact top-k/top-p of our own. Per row (``x`` the
row as fp32, ``T`` its temperature, ``j`` the global token id):

1. ``s_j = x_j / T`` (IEEE fp32 division); ``s = x`` where ``T == 0`` or ``T == 1``.
   ``s_max = max_j s_j``.
2. Noise ``n_j`` keyed by ``(seed, position, j)``: ``h`` = 32-bit murmur3 over the words
   (seed low 32 bits, seed high 32 bits, position low 32 bits, ``j``) from ``h = 0``,
   finalised as ``fmix32(h ^ 16)``; ``u = hi16(h) * 2**-16 + (lo16(h) + 0.5) * 2**-32``
   in fp32; ``l = log1p(-u)`` as a degree-8 fp32 Horner series (coefficients ``1/n``
   rounded to fp32) for ``u < 0.25``, else ``log(max(1 - u, 2**-24))``; ``n_j = -log(-l)``.
3. The kept set ``K``, filters in vLLM's order, each off at its disabling value:
   - min-p (``0.0`` off): drop ``j`` iff ``s_j < s_max + log(min_p)`` (fp32 add,
     ``torch.log``); a NaN threshold drops nothing;
   - top-k (``0`` off, ``k >= V`` keeps all): keep ``j`` iff ``s_j >=`` the k-th largest
     ``s`` of the row, so ties at the cut keep more than k tokens. min-p keeps an upper
     set of ``s``, so this is the k-th largest of what min-p kept when that holds >= k;
   - top-p (``1.0`` off): masses ``q_j = floor(exp(s_j - s_max) * 2**40)`` as int64
     (exact sums, the same at any tp); ``Z = sum of q over K``;
     ``thr = min(Z, max(1, ceil(float64(Z) * float64(p))))`` (``float64(Z)`` rounds above
     ``2**53``); ``tau`` = the largest ``s_j`` in ``K`` with ``sum(q_i : i in K, s_i >= s_j)
     >= thr``; keep ``K ∩ {s_j >= tau}``, so a run of equal ``s`` at the cut stays whole.
     Elements with ``q = 0`` stay only when the cut falls below them (``p`` within about
     ``1e-7`` of 1);
   - top-k and top-p are off in a row whose ``s_max`` is not finite. The row's maximum
     survives every filter.
4. ``T == 0``: ``argmax(x)`` of the raw logits, no noise; otherwise the argmax of
   ``s_j + n_j`` over ``K``. Both as ``torch.argmax``: the lowest id among equal maxima,
   the first NaN if there is one.

Integers are int64 in ``[0, 2**32)`` (a product's low 32 bits are the uint32 product);
each fp step is its own torch op (no fusing). ``log`` differs between libraries in the
last bit, so bits are per device.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

LOW32 = (1 << 32) - 1
MASS_SCALE = 2.0**40
_C1, _C2, _N, _F1, _F2 = 0xCC9E2D51, 0x1B873593, 0xE6546B64, 0x85EBCA6B, 0xC2B2AE35
_SERIES = [torch.tensor(1.0 / n, dtype=torch.float32).item() for n in range(8, 1, -1)]


class Logprobs(NamedTuple):
    """``logprobs[i]`` = log_softmax(row i)[token_ids[i]] (fp32); ``top_ids``/``top_logprobs``
    are the ``top_n`` largest logits of each row, largest first, ties by lower id."""

    logprobs: torch.Tensor
    top_ids: torch.Tensor
    top_logprobs: torch.Tensor


def _rotl(v: torch.Tensor, r: int) -> torch.Tensor:
    return ((v << r) | (v >> (32 - r))) & LOW32


def _mix(h: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    key = _rotl((key * _C1) & LOW32, 15)
    h = _rotl(h ^ ((key * _C2) & LOW32), 13)
    return (h * 5 + _N) & LOW32


def uniform(seeds: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Step 2's ``u``, fp32 ``[M, N]``: ``seeds``/``positions`` ``[M]``, ``ids`` ``[N]``."""
    seeds = seeds.to(torch.int64).reshape(-1, 1)
    h = _mix(torch.zeros_like(seeds), seeds & LOW32)
    h = _mix(h, (seeds >> 32) & LOW32)
    h = _mix(h, positions.to(torch.int64).reshape(-1, 1) & LOW32)
    h = _mix(h, ids.to(torch.int64).reshape(1, -1) & LOW32) ^ 16
    h = ((h ^ (h >> 16)) * _F1) & LOW32
    h = ((h ^ (h >> 13)) * _F2) & LOW32
    h = h ^ (h >> 16)
    hi = (h >> 16).to(torch.float32).mul_(2.0**-16)
    return hi.add_((h & 0xFFFF).to(torch.float32).add_(0.5).mul_(2.0**-32))


def log1p_neg(u: torch.Tensor) -> torch.Tensor:
    """Step 2's ``l = log1p(-u)``."""
    poly = torch.full_like(u, _SERIES[0])
    for c in _SERIES[1:]:
        poly = u.mul(poly).add_(c)
    series = u.neg().mul_(u.mul(poly).add_(1.0))
    return torch.where(u < 0.25, series, torch.clamp_min(1.0 - u, 2.0**-24).log_())


def gumbel(seeds: torch.Tensor, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The noise ``n`` of step 2, fp32 ``[M, N]``."""
    return log1p_neg(uniform(seeds, positions, ids)).neg_().log_().neg_()


def scaled(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Step 1's ``s`` as a new fp32 tensor; ``temperature`` ``[M, 1]`` or ``[M]``."""
    x = logits.to(torch.float32)
    t = temperature.to(device=x.device, dtype=torch.float32).reshape(-1, 1)
    return x.div(torch.where((t == 0) | (t == 1), 1.0, t))  # x / 1 is x, bit for bit


def _row(value, m: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):  # torch.full: no host copy
        return torch.full((m, 1), value, dtype=dtype, device=device)
    return value.to(device=device, dtype=dtype).expand(m).reshape(m, 1)


def kept(s: torch.Tensor, top_k=None, top_p=None, min_p=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept set ``K`` (bool ``[M, V]``) of step 3 for scores ``s``, and ``s_max``."""
    m, v = s.shape
    smax = s.amax(1, keepdim=True)
    keep = torch.ones_like(s, dtype=torch.bool)
    off = ~torch.isfinite(smax)
    if min_p is not None:
        mp = _row(min_p, m, torch.float32, s.device)
        keep &= ~(s < smax + torch.log(mp)) | (mp == 0)
    if top_k is not None:
        k = _row(top_k, m, torch.int64, s.device)
        k = torch.where(k > 0, k, v).clamp(1, v)
        keep &= (s >= torch.sort(s, 1, descending=True).values.gather(1, k - 1)) | off
    if top_p is not None:
        p = _row(top_p, m, torch.float64, s.device)
        q = torch.floor(torch.exp(s - smax) * MASS_SCALE).nan_to_num_(0.0).to(torch.int64)
        q = torch.where(keep, q, 0)
        z = q.sum(1, keepdim=True)
        thr = torch.minimum(torch.ceil(z.double() * p).to(torch.int64).clamp(min=1), z)
        order = torch.sort(s, dim=1, descending=True, stable=True)
        cum = q.gather(1, order.indices).cumsum(1)
        tau = order.values.gather(1, (cum < thr).sum(1, keepdim=True).clamp_(max=v - 1))
        keep &= (s >= tau) | (p >= 1) | off
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
    """The definition above; arguments as :func:`logits_gather.sampling.sample`'s."""
    m, v = logits.shape
    dev = logits.device
    t = temperature.to(device=dev, dtype=torch.float32).reshape(m, 1)
    if positions is None:
        positions = torch.zeros(m, dtype=torch.int64, device=dev)
    s = scaled(logits, t)
    keep, _ = kept(s, top_k, top_p, min_p)
    ids = torch.arange(v, dtype=torch.int64, device=dev)
    g = s + gumbel(seed.to(dev), positions.to(dev), ids)
    sampled = torch.where(keep, g, float("-inf")).argmax(1)
    return torch.where(t[:, 0] == 0, logits.argmax(1), sampled)


def logprobs(logits: torch.Tensor, token_ids: torch.Tensor, top_n: int = 0) -> Logprobs:
    """``log_softmax`` in fp32 at ``token_ids``; top-n by (logit desc, id asc), NaN first
    (every NaN alike, ``-0.0`` equal to ``0.0``)."""
    xf = logits.to(torch.float32)
    lp = torch.log_softmax(xf, 1)
    token = lp.gather(1, token_ids[:, None].long())[:, 0]
    # One NaN and one zero: a radix sort (CUDA's) orders NaN payloads and -0.0 apart.
    keyed = torch.where(xf.isnan(), float("nan"), xf + 0.0)
    top = torch.sort(keyed, dim=1, descending=True, stable=True).indices[:, :top_n]
    return Logprobs(token, top, lp.gather(1, top))
