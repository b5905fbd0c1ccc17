"""Whether a sampler takes the fused path: one collective decision, the same on every rank.

The fused kernels need CUDA, Triton, and peer access between all ranks' GPUs (as
the gather's kernel does); they serve at most :data:`MAX_WORLD` ranks unless
``LOGITS_GATHER_SAMPLING_FUSED`` says otherwise; an int ``top_k <= 64`` joins them
unless ``LOGITS_GATHER_SAMPLING_FUSED_TOPK=0`` (the same on every rank).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from ... import symmetric
from ...checks import agree

log = logging.getLogger(__name__)
WHAT = "VocabParallelSampler construction"

FUSED_ENV = "LOGITS_GATHER_SAMPLING_FUSED"
"""``1``: the fused path at any tp; ``0``: never; unset: up to :data:`MAX_WORLD` ranks."""
TOPK_ENV = "LOGITS_GATHER_SAMPLING_FUSED_TOPK"
"""``0``: an int ``top_k`` takes the exact filter path; ``1`` or unset: ``top_k <= 64`` on
the fused path, and larger ones as per-row ones where :data:`ROWS_ENV` allows. (It was
opt-in while a wrong top_k token on one rank was unexplained; the cause, candidates
replicated across threads in the final kernel, is fixed: README, GPU tests.)"""
ROWS_ENV = "LOGITS_GATHER_SAMPLING_FUSED_TOPK_ROWS"
"""``0``: a per-row ``top_k`` tensor takes the exact filter path; ``1`` or unset: the
fused path too (:func:`.fallback.sample_rows_k`). (It was opt-in until the sampler-level
routing, whose first multi-process run found a flag bug, passed the multi-process GPU
tests after the fix: README, GPU tests.)"""
SINGLE_ENV = "LOGITS_GATHER_SAMPLING_SINGLE"
"""``0``: every round takes two launches (a writer, then a waiting kernel); ``1`` or unset:
eager rounds take one launch (:mod:`.single`, :mod:`.single_filters`), at any ``M`` where
each rank has a GPU of its own, and while ``M`` is at most :func:`single_rows` where
ranks share one."""
MAX_WORLD = 4
"""The most ranks the fused path serves by default: its multi-process GPU tests passed at
tp 2 and 4; at tp 8 it has passed only with ranks emulated in one process (the one
multi-process tp=8 run, before the fix of replicated top-k candidates, returned a wrong
top_k token: README, GPU tests)."""


def policy_problem(world: int) -> str | None:
    """Why the fused path is off for ``world`` ranks by this rank's settings, or None."""
    value = os.environ.get(FUSED_ENV, "")
    if value == "0":
        return f"{FUSED_ENV}=0"
    if value != "1" and world > MAX_WORLD:
        return f"{world} ranks > {MAX_WORLD} (not yet validated on GPUs; {FUSED_ENV}=1 forces it)"
    return None


def available(device: torch.device) -> bool:
    """Whether the fused kernels can run on ``device`` (CUDA with Triton importable)."""
    if device.type != "cuda":
        return False
    try:
        from . import filtered  # noqa: F401 - imports the Triton kernels
    except Exception:  # noqa: BLE001 - no Triton (or a broken one): the torch-ops path
        return False
    return True


def _switch(env: str, default: bool) -> tuple[bool, list[str]]:
    value = os.environ.get(env, "")
    if value not in ("", "0", "1"):
        return False, [f"{env} must be 0 or 1 (or unset), got {value!r}"]
    return (value == "1") if value else default, []


def topk_wanted() -> tuple[bool, list[str]]:
    """This rank's setting for the fused top-k (agreed across ranks by the sampler), and
    what is wrong with it (a value other than unset, ``0`` or ``1``)."""
    return _switch(TOPK_ENV, True)


def rows_wanted() -> tuple[bool, list[str]]:
    """This rank's setting for a per-row ``top_k`` on the fused path (on by default)."""
    return _switch(ROWS_ENV, True)


def _on(device: torch.device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def single_rows(infos: list[dict[str, Any]]) -> int:
    """The most rows of a one-launch call whose programs work by program id
    (:mod:`.single`, Progress): its readers, one per row and rank, may spin while writers
    still need room, so all the ranks on a GPU together keep at most half of its SMs
    waiting. Above it, ranks alone on their GPU take work by ticket, at any ``M``; ranks
    that share one take two launches."""
    return max(1, symmetric.max_ctas(infos) // 2)


def fast_path_problem(
    group: dist.ProcessGroup | None, device: torch.device, local: str | None = None
) -> tuple[str | None, int | None, int]:
    """``(why not, wait_ctas, single)``: why the fused kernels cannot run in this group
    (the same answer on every rank; None if they can), the most CTAs a waiting kernel may
    launch (None: one per row), and :func:`single_rows` (0 when they cannot run).
    ``local``: a reason of this rank's own. Collective.

    Ranks that share a GPU run side by side (MPS); a waiting kernel's CTAs could then fill
    the GPU while a peer's writer kernel, which they wait for, finds no room. So when
    ranks share a GPU, waiting kernels get at most half the SMs split among the sharers.
    """
    mine = symmetric.local_problem(device) if device.type == "cuda" else f"device is {device}"
    mine = mine or local
    info = symmetric.describe_device(device) if mine is None else None
    what = WHAT
    every = agree(group, {}, [], extra=(mine, info), what=what)
    reasons = [f"rank {r}: {why}" for r, (why, _) in enumerate(every) if why]
    infos = [i for _, i in every]
    if not reasons and len(every) > 1:
        peer = symmetric.peer_problem(dist.get_rank(group), infos)
        again = agree(group, {}, [], extra=peer, what=what)
        reasons = [f"rank {r}: {why}" for r, why in enumerate(again) if why]
    if reasons:
        return "; ".join(reasons), None, 0
    sharing = max(sum(1 for j in infos if j["uuid"] == i["uuid"]) for i in infos)
    half = single_rows(infos)
    return None, (None if sharing == 1 else half), half


LOADING_ENV = "CUDA_MODULE_LOADING"
COMPILE_S = 300.0
"""The shortest wait of the shared-GPU launch barrier: a peer compiles the kernel first
(0.1-2 s per kernel on one CPU core; far more on a loaded machine)."""
_warned_lazy: list[bool] = []  # the lazy-loading warning, once per process


def sharing_barrier(group: dist.ProcessGroup | None, timeout_s: float) -> Any:
    """The barrier that ranks sharing a GPU run before each fused kernel's first launch
    (:class:`.launcher.Launcher`): a host-side one (such groups are gloo: NCCL refuses
    two ranks on one GPU), gloo's monitored barrier, which raises after ``timeout_s``
    (at least :data:`COMPILE_S`: a live peer may still be compiling the kernel) naming
    the ranks that did not arrive. Warns once when CUDA loads
    modules lazily (the default): torch's own kernels then load on first use, and a
    first use while a peer's kernel waits on the shared GPU can stall until the wait
    times out."""
    if os.environ.get(LOADING_ENV, "") != "EAGER" and not _warned_lazy:
        _warned_lazy.append(True)
        log.warning(
            "VocabParallelSampler: ranks share a GPU and %s is not EAGER: a kernel loaded "
            "on first use while a peer's kernel waits can stall until the timeout; set "
            "%s=EAGER in every rank's environment",
            LOADING_ENV,
            LOADING_ENV,
        )

    timeout = datetime.timedelta(seconds=max(timeout_s, COMPILE_S))

    def barrier() -> None:
        if dist.get_backend(group) == "gloo":
            dist.monitored_barrier(group=group, timeout=timeout, wait_all_ranks=True)
        else:
            dist.barrier(group=group)

    return barrier


def decide(sampler: Any, trap: bool) -> tuple[Any, bool, bool]:
    """``(Fused or None, fused top-k, fused per-row top-k)`` for ``sampler`` (its group,
    device, columns, capacity, rank and world size); builds the first mailboxes.
    Collective."""
    device = sampler.device
    with _on(device):  # collectives and symmetric memory on this rank's GPU
        local = policy_problem(sampler.world_size)
        if local is None and device.type == "cuda" and not available(device):
            local = "the fused kernels do not import"
        why, wait_ctas, single = fast_path_problem(sampler.group, device, local)
        if why is not None:
            log.info("VocabParallelSampler: torch-ops path, because %s", why)
            return None, False, False
        topk, problems = topk_wanted()
        rows, more = rows_wanted()
        one, most = _switch(SINGLE_ENV, True)
        settings = {TOPK_ENV: topk, ROWS_ENV: rows, SINGLE_ENV: one}
        agree(sampler.group, settings, problems + more + most, what=WHAT)
        from .filtered import Fused

        f = Fused(
            sampler.columns,
            sampler.world_size,
            sampler.rank,
            sampler.box,
            trap,
            wait_ctas,
            device.index,
            None if wait_ctas is None else sharing_barrier(sampler.group, sampler.timeout_s),
            # wait_ctas is None: no rank shares a GPU, so one launch at any M (tickets)
            (sampler.capacity if wait_ctas is None else single) if one else 0,
            single,
        )
        for op in ("greedy", "sample"):
            sampler.box(f.words(op), sampler.capacity)
        return f, topk, topk and rows


__all__ = [
    "FUSED_ENV",
    "MAX_WORLD",
    "ROWS_ENV",
    "SINGLE_ENV",
    "TOPK_ENV",
    "available",
    "decide",
    "fast_path_problem",
    "policy_problem",
    "rows_wanted",
    "single_rows",
    "topk_wanted",
]
