"""Whether a sampler takes the fused path: one collective decision, the same on every rank.

The fused kernels need CUDA, Triton and peer access between all ranks' GPUs, and serve at
most :data:`MAX_WORLD` ranks. :data:`TORCH_ENV` sends every call to the torch-ops path, as
``fused=False`` does; it must be the same on every rank (every rank raises otherwise).
Ranks that share a GPU (MPS; a test placement) take the two-launch rounds only, their
waiting kernels launch at most half the GPU's CTAs split among the sharers (a waiting
kernel may otherwise fill the GPU while a peer's writer it waits for finds no room), and
they meet at a host barrier before each kernel variant's first launch
(:func:`sharing_barrier`).
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ... import symmetric
from ...checks import agree, on_device
from ...logs import log_once
from .launcher import pdl_capable

if TYPE_CHECKING:
    from ..state import State
    from .fused import Fused

log = logging.getLogger(__name__)
WHAT = "VocabParallelSampler construction"
TORCH_ENV = "LOGITS_GATHER_SAMPLING_TORCH"
"""``1``: every call takes the torch-ops path; ``0`` or unset: the fused path where it can
run. The same on every rank."""
MAX_WORLD = 4
"""The most ranks the fused path serves: its multi-process GPU tests passed at tp 2 and
4; tp 8 has run only with ranks emulated in one process."""


def torch_wanted() -> tuple[bool, list[str]]:
    """This rank's :data:`TORCH_ENV`, and what is wrong with it (not unset, 0 or 1)."""
    value = os.environ.get(TORCH_ENV, "")
    if value not in ("", "0", "1"):
        return True, [f"{TORCH_ENV} must be 0 or 1 (or unset), got {value!r}"]
    return value == "1", []


def available(device: torch.device) -> bool:
    """Whether the fused kernels can run on ``device`` (CUDA with Triton importable)."""
    if device.type != "cuda":
        return False
    try:
        from . import fused  # noqa: F401 - imports the Triton kernels
    except Exception:  # noqa: BLE001 - no Triton (or a broken one): the torch-ops path
        return False
    return True


def single_rows(infos: list[dict[str, Any]]) -> int:
    """The most rows of a one-launch call: half the SMs (:mod:`..kernels.waiters`, Progress)."""
    return max(1, symmetric.max_ctas(infos) // 2)


def fast_path_problem(
    group: dist.ProcessGroup | None, device: torch.device, local: str | None = None
) -> tuple[str | None, bool, int]:
    """``(why not, sharing, half)``: why the fused kernels cannot run in this group (the
    same answer on every rank; None if they can), whether ranks share a GPU, and
    :func:`single_rows`. ``local``: a reason of this rank's own. Collective."""
    mine = symmetric.local_problem(device) if device.type == "cuda" else f"device is {device}"
    mine = mine or local
    info = symmetric.describe_device(device) if mine is None else None
    every = agree(group, {}, [], extra=(mine, info), what=WHAT)
    reasons = [f"rank {r}: {why}" for r, (why, _) in enumerate(every) if why]
    infos = [i for _, i in every]
    if not reasons and len(every) > 1:
        peer = symmetric.peer_problem(dist.get_rank(group), infos)
        again = agree(group, {}, [], extra=peer, what=WHAT)
        reasons = [f"rank {r}: {why}" for r, why in enumerate(again) if why]
    if reasons:
        return "; ".join(reasons), False, 0
    sharing = len({i["uuid"] for i in infos}) < len(infos)
    return None, sharing, single_rows(infos)


LOADING_ENV = "CUDA_MODULE_LOADING"
COMPILE_S = 300.0
"""The shortest wait of the shared-GPU launch barrier: a peer may still be compiling."""
_warned_lazy: list[bool] = []  # the lazy-loading warning, once per process


def sharing_barrier(group: dist.ProcessGroup | None, timeout_s: float) -> Callable[[], None]:
    """The host barrier that ranks sharing a GPU run before each fused kernel variant's
    first launch (:class:`.launcher.Launcher`): loading a CUDA module waits for the GPU to
    drain, a peer's waiting kernel included, which may wait for a writer this rank
    launches only after the load. gloo's monitored barrier (such groups are gloo: NCCL
    refuses two ranks on one GPU) raises after ``timeout_s`` (at least :data:`COMPILE_S`)
    naming the ranks that did not arrive. Warns once unless ``CUDA_MODULE_LOADING=EAGER``:
    torch's own kernels otherwise load on first use, with the same hazard."""
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


def decide(state: State, trap: bool) -> Fused | None:
    """The sampler's :class:`.fused.Fused` for its ``state``, or None for the torch-ops
    path; builds the first mailboxes. Collective."""
    device = state.device
    with on_device(device):  # collectives and symmetric memory on this rank's GPU
        use_torch, problems = torch_wanted()
        agree(state.group, {TORCH_ENV: use_torch}, problems, what=WHAT)
        if use_torch:
            log.info("VocabParallelSampler: torch-ops path, because %s=1", TORCH_ENV)
            return None
        local = None
        if state.world_size > MAX_WORLD:
            local = f"{state.world_size} ranks > {MAX_WORLD} (not validated on GPUs)"
        elif device.type == "cuda" and not available(device):
            local = "the fused kernels do not import"
        why, sharing, half = fast_path_problem(state.group, device, local)
        if why is not None:  # on a GPU the caller expected the fused kernels: a warning
            level = logging.WARNING if device.type == "cuda" else logging.INFO
            log_once(log, f"VocabParallelSampler: torch-ops path, because {why}", level)
            return None
        from .fused import Fused

        f = Fused(
            state.columns,
            state.world_size,
            state.rank,
            state.box,
            trap,
            half if sharing else None,
            device.index,
            sharing_barrier(state.group, state.timeout_s) if sharing else None,
            0 if sharing else half,
            pdl=not sharing and pdl_capable(device),
        )
        for op in ("greedy", "sample"):
            state.box(f.words(op), state.capacity)
        return f
