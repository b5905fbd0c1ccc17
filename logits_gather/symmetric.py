"""Symmetric buffers: allocation, rendezvous and the peer address tables.

Everything here is collective over the group and happens once, at
construction; the per-call path only reads the frozen :class:`PeerBuffers`.
Allocation success is agreed on before any rendezvous (see :func:`allocate`).
"""

from __future__ import annotations

import os
import socket
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .checks import agree

OVERLAP_ENV = "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"


def slot_stride(capacity: int, row: int) -> int:
    """Elements between slots: padded to 128 bytes' worth of the widest element,
    so every slot base keeps the allocation's 16-byte alignment."""
    return -(-capacity * row // 64) * 64


@dataclass(frozen=True)
class PeerBuffers:
    """This rank's symmetric tensors and every rank's addresses of them."""

    slots: torch.Tensor  # [S, capacity, W * N] local view of the output slots
    flags: torch.Tensor  # int32 [flag_rows, max_ctas], zero at start
    peer_flags: torch.Tensor  # int64 [W] device table: each rank's flags base address
    slot_bases: tuple[tuple[int, ...], ...]  # [S][W] address of slot s on rank w
    handles: tuple[object, ...]  # keep the rendezvous handles (and mappings) alive


def local_problem(device: torch.device) -> str | None:
    """Why this rank alone cannot use the kernel, or None."""
    if device.type != "cuda":
        return f"device is {device}, not CUDA"
    try:
        import triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no kernel
        return f"Triton is not importable ({type(exc).__name__}: {exc})"
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"torch symmetric memory is unavailable ({type(exc).__name__}: {exc})"
    return None


def describe_device(device: torch.device) -> dict[str, object]:
    """What peers need to know about this rank's GPU to judge the fast path."""
    props = torch.cuda.get_device_properties(device)
    return {
        "host": socket.gethostname(),
        "uuid": str(getattr(props, "uuid", device.index)),
        "index": device.index,
        "sms": props.multi_processor_count,
    }


def peer_problem(me: int, infos: list[dict[str, object]]) -> str | None:
    """Why this group cannot map its peers' memory, judged from every rank's info."""
    hosts = sorted({str(i["host"]) for i in infos})
    if len(hosts) > 1:
        return f"ranks span several hosts ({', '.join(hosts)})"
    uuids = [i["uuid"] for i in infos]
    if len(set(uuids)) < len(uuids) and os.environ.get(OVERLAP_ENV) != "1":
        return f"several ranks share one GPU; set {OVERLAP_ENV}=1 to allow it"
    mine = infos[me]
    visible = {
        str(torch.cuda.get_device_properties(i).uuid): i for i in range(torch.cuda.device_count())
    }
    for r, info in enumerate(infos):
        other = visible.get(str(info["uuid"]))
        if info["uuid"] != mine["uuid"] and other is not None:
            if not torch.cuda.can_device_access_peer(int(mine["index"]), other):
                return (
                    f"cuda:{mine['index']} cannot access rank {r}'s GPU (cuda:{other}) peer-to-peer"
                )
    return None


def max_ctas(infos: list[dict[str, object]]) -> int:
    """CTAs per call: never more than the SMs of the smallest GPU divided by the
    most ranks sharing one GPU, so every CTA of every rank is co-resident."""
    sharing = max(sum(1 for j in infos if j["uuid"] == i["uuid"]) for i in infos)
    return max(1, min(int(i["sms"]) for i in infos) // sharing)


class AllocationError(RuntimeError):
    """Symmetric memory could not be allocated on some rank; raised on every rank."""


def allocate(
    *,
    capacity: int,
    columns: int,
    slots: int,
    world_size: int,
    rank: int,
    dtype: torch.dtype,
    device: torch.device,
    ctas: int,
    flag_rows: int,
    group: dist.ProcessGroup | None,
) -> PeerBuffers:
    """Allocates, agrees on success with every rank, and only then rendezvouses.

    ``symm_mem.empty`` can fail on one rank alone (out of memory, say). Its peers
    would then block in the rendezvous handle exchange until the store times out;
    instead every rank learns of the failure in one exchange first and raises the
    same :class:`AllocationError`, naming the failing ranks.
    """
    import torch.distributed._symmetric_memory as symm_mem

    group = group if group is not None else dist.group.WORLD
    stride = slot_stride(capacity, world_size * columns)
    data = flags = None
    failure = None
    try:
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:  # needed by older torch, deprecated (or absent) in newer
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(group.group_name)
        data = symm_mem.empty(slots * stride, dtype=dtype, device=device)
        flags = symm_mem.empty(flag_rows * ctas, dtype=torch.int32, device=device)
        flags.zero_()
    except Exception as exc:  # noqa: BLE001 - agreed below, raised on every rank
        failure = f"{type(exc).__name__}: {exc}"
    every = agree(group, {"step": "symm_mem allocation"}, [], extra=failure)
    failed = [f"rank {r}: {f}" for r, f in enumerate(every) if f]
    if failed:
        del data, flags
        raise AllocationError(
            f"symmetric-memory allocation ({slots} slots x {capacity} x {world_size * columns} "
            f"{dtype} per rank) failed on " + "; ".join(failed)
        )
    data_handle = symm_mem.rendezvous(data, group)
    flag_handle = symm_mem.rendezvous(flags, group)
    data_bases = peer_bases(data, data_handle, rank)
    flag_bases = peer_bases(flags, flag_handle, rank)
    item = data.element_size()
    slot_bases = tuple(tuple(b + s * stride * item for b in data_bases) for s in range(slots))
    view = data.view(slots, stride)[:, : capacity * world_size * columns]
    torch.cuda.synchronize(device)
    return PeerBuffers(
        slots=view.view(slots, capacity, world_size * columns),
        flags=flags.view(flag_rows, ctas),
        peer_flags=torch.tensor(flag_bases, dtype=torch.int64, device=device),
        slot_bases=slot_bases,
        handles=(data_handle, flag_handle, data, flags),
    )


def peer_bases(tensor: torch.Tensor, handle: object, rank: int) -> list[int]:
    """Every rank's address of ``tensor``: the handle gives allocation bases, and
    the tensor sits at the same offset inside each rank's allocation."""
    ptrs = [int(p) for p in handle.buffer_ptrs]
    offset = tensor.data_ptr() - ptrs[rank]
    if offset < 0:
        raise RuntimeError(f"symmetric tensor lies before its allocation base (offset {offset})")
    return [p + offset for p in ptrs]
