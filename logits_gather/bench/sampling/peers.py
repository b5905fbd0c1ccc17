"""The methods of the sampling benchmark: ours and its peers, as ``{op: call}`` per M.

Every call takes no argument and returns the tokens ``[M]`` (int64). Each method gets
its own copy of the shard (made by the caller, outside the timed region) and never
writes into it, so no method can change what the next one reads.

- ``ours``: our vocab-parallel sampler on the shard; every call into it goes through
  :func:`ours_calls`, the one adapter to our API.
- ``vllm``: vLLM's V2 sampler kernels (``gumbel_sample``, ``apply_temperature``,
  ``apply_min_p``, ``apply_top_k_top_p_triton``) on the gathered logits, with vLLM's
  fp32 copy inside the timed call; only when ``vllm`` imports.
- ``torch``: the torch ops vLLM runs without Triton (softmax, ``exponential_``,
  division, argmax; ``topk`` for top-k alone, a full sort for top-p) on the gathered
  logits. Its noise is one unseeded ``exponential_`` per call (vLLM's path for rows
  without a per-request generator), so its tokens are not comparable, only its time.

"Gathered" is the stock path: an NCCL (gloo on CPU) all-gather into a staging buffer
plus the permute copy at tp > 1, and nothing at tp = 1.
"""

from __future__ import annotations

from collections.abc import Callable
from inspect import signature
from typing import Any

import torch
import torch.distributed as dist

# op -> (top_k, top_p, min_p); greedy is temperature 0.
OPS: dict[str, tuple[int | None, float | None, float | None]] = {
    "greedy": (None, None, None),
    "sample": (None, None, None),
    "min_p": (None, None, 0.05),
    "top_k": (50, None, None),
    "top_p": (None, 0.9, None),
    "top_k_top_p": (50, 0.9, None),
}
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
Calls = dict[str, Callable[[], torch.Tensor]]


def ours_calls(shard: torch.Tensor, temp, seeds, positions, *, capacity: int) -> Calls:
    """The adapter: the one place that builds and calls our sampler.

    It works with both API generations, so a change of the sampler's signature needs
    no change here: the sampler is built with ``columns, capacity`` and keywords only
    (today ``group`` comes third, in the new API ``device`` does); filters go by
    keyword; ``positions`` is passed only when ``sample`` takes it, and
    ``check_values=False`` (no host sync, so the calls capture) only when the class
    takes it."""
    from ... import sampling

    cls = sampling.VocabParallelSampler
    opts = {"check_values": False} if "check_values" in signature(cls).parameters else {}
    sampler = cls(shard.shape[1], capacity, device=shard.device, **opts)
    pos = (positions,) if "positions" in signature(sampler.sample).parameters else ()
    calls: Calls = {"greedy": lambda: sampler.greedy(shard)}
    for op, (k, p, mp) in OPS.items():
        if op != "greedy":
            calls[op] = lambda k=k, p=p, mp=mp: sampler.sample(
                shard, temp, seeds, *pos, top_k=k, top_p=p, min_p=mp
            )
    return calls


def gatherer(shard: torch.Tensor) -> Callable[[], torch.Tensor]:
    """The stock gather of ``shard`` to ``[M, V]``: all-gather plus permute, or the
    shard itself at world size 1 (vLLM gathers nothing there)."""
    world = dist.get_world_size()
    if world == 1:
        return lambda: shard
    m, n = shard.shape
    staging = torch.empty(world * m, n, dtype=shard.dtype, device=shard.device)

    def gather() -> torch.Tensor:
        _all_gather(staging, shard)
        return staging.view(world, m, n).permute(1, 0, 2).reshape(m, world * n)

    return gather


def vllm_kernels() -> tuple[Any, str]:
    """vLLM's four sampler kernels as a namespace, or (None, why not)."""
    try:
        from vllm.v1.sample.ops.topk_topp_triton import apply_top_k_top_p_triton
        from vllm.v1.worker.gpu.sample.gumbel import apply_temperature, gumbel_sample
        from vllm.v1.worker.gpu.sample.min_p import apply_min_p
    except Exception as exc:  # ImportError, or vLLM's own probing failing
        return None, f"{type(exc).__name__}: {exc}"
    import types

    return types.SimpleNamespace(
        gumbel_sample=gumbel_sample,
        apply_temperature=apply_temperature,
        apply_min_p=apply_min_p,
        apply_top_k_top_p=apply_top_k_top_p_triton,
    ), ""


def vllm_calls(shard: torch.Tensor, temp, seeds, positions, *, kernels: Any) -> Calls:
    """What vLLM's V2 sampler runs on the gathered logits, per op."""
    full = gatherer(shard)
    m = shard.shape[0]
    dev = shard.device
    idx = torch.arange(m, dtype=torch.int32, device=dev)
    zeros = torch.zeros(m, dtype=torch.float32, device=dev)

    def greedy() -> torch.Tensor:
        return kernels.gumbel_sample(
            full(), idx, zeros, seeds, positions, apply_temperature=False, is_drafting=False
        )

    def make(k: int | None, p: float | None, mp: float | None):
        kk = None if k is None else torch.full((m,), k, dtype=torch.int32, device=dev)
        pp = None if p is None else torch.full((m,), p, dtype=torch.float32, device=dev)
        mm = None if mp is None else torch.full((m,), mp, dtype=torch.float32, device=dev)

        def call() -> torch.Tensor:
            g = full()
            x = torch.empty(g.shape, dtype=torch.float32, device=dev).copy_(g)
            kernels.apply_temperature(x, idx, temp)
            if mm is not None:
                kernels.apply_min_p(x, idx, mm)
            if kk is not None or pp is not None:
                x = kernels.apply_top_k_top_p(x, kk, pp, has_topp_only_rows=kk is None)
            return kernels.gumbel_sample(
                x, idx, temp, seeds, positions, apply_temperature=False, is_drafting=False
            )

        return call

    calls: Calls = {"greedy": greedy}
    calls.update({op: make(*f) for op, f in OPS.items() if op != "greedy"})
    return calls


def _top_k(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logits below each row's k-th largest become -inf (``topk``, no full sort)."""
    kth = x.topk(k, dim=-1).values[:, -1:]
    return x.masked_fill(x < kth, float("-inf"))


def _top_k_top_p(x: torch.Tensor, k: int | None, p: float) -> torch.Tensor:
    """The sort-based filter: ascending sort, top-k cut, then the smallest tail whose
    probability mass is at most 1 - p goes (the largest token always stays)."""
    sorted_x, order = x.sort(dim=-1, descending=False)
    if k is not None:
        kth = sorted_x[:, -k : -k + 1] if k > 1 else sorted_x[:, -1:]
        sorted_x = sorted_x.masked_fill(sorted_x < kth, float("-inf"))
    mass = sorted_x.softmax(dim=-1).cumsum(dim=-1)
    drop = mass <= 1 - p
    drop[:, -1] = False
    sorted_x = sorted_x.masked_fill(drop, float("-inf"))
    return sorted_x.scatter(-1, order, sorted_x)


def torch_calls(shard: torch.Tensor, temp, seeds, positions) -> Calls:
    """vLLM's torch-only sampler ops on the gathered logits (out of place throughout)."""
    full = gatherer(shard)
    greedy_rows = temp == 0  # as vLLM: divide those rows by 1, then take their argmax
    t = torch.where(greedy_rows, 1.0, temp)[:, None]
    all_random = not bool(greedy_rows.any())  # decided once, outside the timed calls

    def make(k: int | None, p: float | None, mp: float | None):
        def call() -> torch.Tensor:
            g = full()
            x = g.float() / t
            if mp is not None:
                probs = x.softmax(dim=-1)
                cut = probs.amax(dim=-1, keepdim=True) * mp
                x = x.masked_fill(probs < cut, float("-inf"))
            if p is not None:
                x = _top_k_top_p(x, k, p)
            elif k is not None:
                x = _top_k(x, k)
            probs = x.softmax(dim=-1)
            q = torch.empty_like(probs).exponential_()
            tokens = probs.div_(q).argmax(dim=-1)
            return tokens if all_random else torch.where(greedy_rows, g.argmax(dim=-1), tokens)

        return call

    calls: Calls = {"greedy": lambda: full().argmax(dim=-1)}
    calls.update({op: make(*f) for op, f in OPS.items() if op != "greedy"})
    return calls
