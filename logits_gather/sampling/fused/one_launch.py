"""The host side of the one-launch rounds (kernels and protocol: :mod:`.single`,
:mod:`.single_filters`).

In an eager call of at most ``single_rows`` rows (any M where each rank has a GPU of
its own: above ``ticket_rows`` the programs take work by ticket, :mod:`.single`), each
round (greedy, sample and logprobs have one; min-p and top-k two) is one kernel
launch, and after the first call of a specialisation that launch is *bound*
(:meth:`.launcher.Launcher.bind`): one call of Triton's C launcher with the call's few
addresses, and no Python over the rest. On one H200 at world size 1 that took an eager
greedy call from 39.8 to 17.7 us of host time, sample from 35.4 to 20.3 (M=4, one
machine start).

The functions here are :class:`.filtered.Fused` methods.
"""

from __future__ import annotations

from typing import Any

import torch


def wanted(self: Any, shard: torch.Tensor) -> bool:
    """Whether a greedy, sample or logprobs call on ``shard`` takes one launch: at most
    ``single_rows`` rows, and not under graph capture unless ``single_in_graphs``."""
    if shard.shape[0] > self.single_rows:
        return False
    if self.single_in_graphs or not shard.is_cuda:  # not shard.is_cuda: the interpreter
        return True
    return not torch.cuda.is_current_stream_capturing()


def launch(
    self: Any, fn: Any, shard: torch.Tensor, op: str, free: tuple, tail: tuple, consts: dict,
    room: int = 0, n: tuple = (), programs: int = 0, warps: int = 0,
) -> None:  # fmt: skip
    """Launches ``op``'s one-launch kernel ``fn`` on ``shard``'s rows: arguments ``(x,
    x_stride, *free, *n, mailbox..., *tail)``, ``free`` the call's tensors, ``n`` its
    unspecialised ints; grid ``(M, programs)`` (default: one program per split) of
    ``warps`` warps (default: the geometry's); its programs take tickets above
    ``ticket_rows`` rows (:mod:`.single`, Progress). Bound launches are kept per mailbox (a
    new mailbox has new addresses), under what Triton specialises in the free
    arguments."""
    consts = dict(consts, TICKET=shard.shape[0] > self.ticket_rows)
    mb = self.box(self.words(op, room), shard.shape[0])
    mb.check()
    x = shard if shard.stride(1) == 1 else shard.contiguous()
    xp, xs = x.data_ptr(), x.stride(0)
    args = [xp, xs]
    key = [id(fn), x.dtype, xp & 15, xs, programs, warps, *consts.values()]
    for a in free:
        p = a.data_ptr()
        args.append(p)
        key += (p & 15, a.dtype)
    key = tuple(key)
    plan = mb.plans.get(key)
    if plan is None or not self.launch.fast(plan, x.shape[0], (*args, *n)):
        _first(self, fn, x, op, free, tail, consts, room, n, mb, key, programs, warps)


def _first(self, fn, x, op, free, tail, consts, room, n, mb, key, programs, warps) -> None:
    """:func:`launch` through :class:`.launcher.Launcher` (compiling if needed), then binds
    that launch under ``key``."""
    geo = self.geometry(op, room)
    own = self.rank * self.words(op, room)
    args = (x, x.stride(0), *free, *n, mb.peers, mb.data, mb.epoch, mb.arrivals)
    args += (mb.parity_stride, mb.row_elems, own, self.columns, self.col0, mb.status_ptr)
    args += (mb.timeout_us, *tail)
    warps, programs = warps or geo.warps, programs or geo.splits
    consts = dict(consts, BLOCK=geo.block, WORLD=self.world, THREADS=32 * warps, CAND=geo.cand,
                  TRAP=self.trap)  # fmt: skip
    self.launch(fn, (x.shape[0], programs), args, consts, warps)
    plan = self.launch.bind(fn, programs, args, consts, warps, 2 + len(free) + len(n))
    if plan is not None:
        mb.plans[key] = plan


__all__ = ["launch", "wanted"]
