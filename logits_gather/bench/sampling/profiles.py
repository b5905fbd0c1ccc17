"""The logits profiles of the sampling benchmark: what rows users send, four ways.

Every profile gives full ``[M, V]`` rows (fp32, cast to bf16 by the caller; every rank
builds the same rows from the seed and keeps its own ``V/tp`` columns) and one
temperature per row:

* ``peaked``: LLM-like rows whose entropy after the temperature lies in
  ``PEAKED_NATS`` (0.5 to 3 nats). Each row draws a target entropy uniformly from that
  range and takes a Zipf profile over the vocabulary, ``p_j ~ (j + 1) ** -a`` for the
  j-th most likely token, with the exponent ``a`` chosen so that the profile's entropy
  is the target (``a`` is read off a table of the entropy against ``a``); its logits
  ``-a * T * log(j + 1)`` (so that ``logits / T`` has that entropy) are then randomly
  permuted over the vocabulary, per row. ``T = 0.8`` on every row. bf16 rounding moves
  the entropy a little; the benchmark measures it on the rows it runs and reports the
  range.
* ``t08``: ``randn * 3`` at ``T = 0.8`` on every row (the benchmark's earlier default).
* ``flat``: ``randn * 3`` with ``T`` drawn uniformly from ``[1.0, 1.5]`` per row:
  the default of most clients and creative settings, whose nucleus holds thousands
  of tokens.
* ``mixed``: ``randn * 3`` with ``T`` drawn uniformly from ``[0, 1.5]`` per row, and
  every row ``i`` with ``i % 8 == 1`` at ``T = 0`` (greedy) and ``i % 8 == 2`` at
  exactly ``T = 1`` (from M = 4 on, a batch mixes them).

The same ``(profile, M, V, seed)`` gives the same rows and temperatures on every rank
and every run.
"""

from __future__ import annotations

import functools

import torch

PROFILES = ("peaked", "t08", "flat", "mixed")
PEAKED_NATS = (0.5, 3.0)
PEAKED_T = 0.8  # peaked and t08; not 1, where vLLM skips the division
FLAT_T = (1.0, 1.5)
MIXED_T = (0.0, 1.5)
SCALE = 3.0  # randn * 3 for t08, flat and mixed


@functools.lru_cache(maxsize=8)
def _entropy_table(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(exponents ``a``, entropy in nats of ``p_j ~ (j + 1) ** -a`` over ``vocab``), the
    entropy decreasing in ``a``."""
    a = torch.logspace(-0.1, 0.9, 96, dtype=torch.float64)  # 0.8 to 8
    logr = torch.log(torch.arange(1, vocab + 1, dtype=torch.float64))
    nats = []
    for chunk in a.split(16):
        lp = -chunk[:, None] * logr
        lp = lp - lp.logsumexp(dim=1, keepdim=True)
        nats.append(-(lp.exp() * lp).sum(dim=1))
    return a, torch.cat(nats)


def zipf_exponent(vocab: int, nats: torch.Tensor) -> torch.Tensor:
    """The exponent ``a`` whose Zipf profile over ``vocab`` tokens has entropy ``nats``
    (linear interpolation in the table, per element)."""
    a, h = _entropy_table(vocab)
    a, h = a.flip(0), h.flip(0)  # entropy increasing
    x = nats.to(torch.float64).clamp(h[0].item(), h[-1].item())
    i = torch.searchsorted(h, x).clamp(1, len(h) - 1)
    w = (x - h[i - 1]) / (h[i] - h[i - 1])
    return a[i - 1] + w * (a[i] - a[i - 1])


def _generator(profile: str, m: int, vocab: int, seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(
        seed * 1_000_003 + PROFILES.index(profile) * 65_537 + m * 257 + vocab
    )


def _peaked(m: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    lo, hi = PEAKED_NATS
    target = lo + (hi - lo) * torch.rand(m, generator=gen, dtype=torch.float64)
    a = zipf_exponent(vocab, target)
    logr = torch.log(torch.arange(1, vocab + 1, dtype=torch.float64))
    rows = torch.empty(m, vocab)
    for i in range(m):
        perm = torch.randperm(vocab, generator=gen)
        rows[i, perm] = (-a[i] * PEAKED_T * logr).float()
    return rows


def make(profile: str, m: int, vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits [m, vocab] fp32, temperature [m] fp32)`` on the CPU for ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: one of {', '.join(PROFILES)}")
    gen = _generator(profile, m, vocab, seed)
    if profile == "peaked":
        return _peaked(m, vocab, gen), torch.full((m,), PEAKED_T)
    logits = torch.randn(m, vocab, generator=gen) * SCALE
    if profile == "t08":
        return logits, torch.full((m,), PEAKED_T)
    lo, hi = FLAT_T if profile == "flat" else MIXED_T
    temp = lo + (hi - lo) * torch.rand(m, generator=gen)
    if profile == "mixed":
        rows = torch.arange(m)
        temp[rows % 8 == 1] = 0.0
        temp[rows % 8 == 2] = 1.0
    return logits, temp


def entropy(logits: torch.Tensor, temp: torch.Tensor) -> list[float | None]:
    """Per row, the entropy in nats of ``softmax(logits / T)`` (fp32 math); None for the
    greedy rows (``T = 0``)."""
    out: list[float | None] = []
    for row, t in zip(logits, temp.tolist(), strict=True):
        if t == 0:
            out.append(None)
            continue
        lp = (row.float() / t).log_softmax(dim=-1)
        out.append(float(-(lp.exp() * lp).sum()))
    return out


def entropy_range(values: list[float | None]) -> dict:
    """``{"min", "max", "rows", "greedy_rows"}`` over the sampled rows (nats)."""
    got = [v for v in values if v is not None]
    return {
        "min": min(got) if got else None,
        "max": max(got) if got else None,
        "rows": len(got),
        "greedy_rows": len(values) - len(got),
    }
