"""One rank of ``python -m logits_gather.bench``: process groups, device, agreement
helpers, the memory check, then the gather wing's run or the LM-head wing's."""

from __future__ import annotations

import datetime
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .cli import BenchConfig
from .plan import Plan


@dataclass
class Ctx:
    """What every part of the benchmark needs to know about this rank."""

    cfg: BenchConfig
    plan: Plan
    rank: int
    world: int
    device: torch.device
    ctrl: Any  # gloo group for host-side agreement
    beat: Callable[[str], None]

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def group(self) -> Any:
        return dist.group.WORLD

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (a host-side barrier as well)."""
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.ctrl)
        return out

    def first_reason(self, reason: str | None) -> str | None:
        """None when no rank has a reason, else the reasons, each naming its rank."""
        reasons = self.gather(reason)
        bad = [(r, why) for r, why in enumerate(reasons) if why]
        if not bad:
            return None
        if len({why for _, why in bad}) == 1 and len(bad) == self.world:
            return bad[0][1]
        return "; ".join(f"rank {r}: {why}" for r, why in bad)

    def barrier(self) -> None:
        dist.barrier(group=self.ctrl)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def _init(plan: Plan, rank: int, device: torch.device, timeout_s: float) -> None:
    timeout = datetime.timedelta(seconds=max(60.0, timeout_s))
    kwargs: dict[str, Any] = {"backend": plan.pg_backend, "timeout": timeout}
    if plan.mode == "nccl":
        kwargs["device_id"] = device  # eager NCCL init: mem-pool registration needs a comm
    try:
        dist.init_process_group(**kwargs)
    except TypeError:
        kwargs.pop("device_id", None)
        dist.init_process_group(**kwargs)


def setup(cfg: BenchConfig, plan: Plan, rank: int, beat: Callable[[str], None]) -> Ctx:
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = plan.device(local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if plan.mode == "nccl" and cfg.nccl_symm_route == "symm_mem" and "nccl_symm" in cfg.methods:
        # process-global and fixed at the first allocation: must precede ours' buffers
        import torch.distributed._symmetric_memory as symm_mem

        symm_mem.set_backend("NCCL")
    beat("init_process_group")
    _init(plan, rank, device, cfg.stall_timeout)
    world = dist.get_world_size()
    ctrl = dist.new_group(backend="gloo") if plan.pg_backend != "gloo" else dist.group.WORLD
    return Ctx(
        cfg=cfg, plan=plan, rank=dist.get_rank(), world=world, device=device, ctrl=ctrl, beat=beat
    )


def run(cfg: BenchConfig, plan: Plan, rank: int, beat: Callable[[str], None]) -> None:
    warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*deprecated.*")
    ctx = setup(cfg, plan, rank, beat)
    try:
        with torch.inference_mode():
            _run(ctx)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(ctx: Ctx) -> None:
    from .preflight import check_rank

    cfg = ctx.cfg
    if cfg.fail_rank == ctx.rank:
        raise RuntimeError(f"--fail-rank {cfg.fail_rank}: this rank fails on purpose")
    problem = None
    try:
        check_rank(ctx)
    except MemoryError as exc:
        problem = str(exc)
    reason = ctx.first_reason(problem)  # every rank stops, none is left in a collective
    if reason:
        raise MemoryError(reason)
    if cfg.head is not None:  # the LM-head benchmark: its own inputs, methods and report
        from .lm_head.run import run_head

        run_head(ctx)
    else:
        from .gather.run import run_gather

        run_gather(ctx)
