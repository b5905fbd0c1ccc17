"""Agreement between ranks on each sampling call (``check_calls``).

Every sampling call is collective: each rank passes its own shard, and the same
operation, ``M``, dtype, filters and per-row arguments. With ``check_calls=True`` (or
``LOGITS_GATHER_CHECK_CALLS=1``) each call first exchanges one fixed-size record over a
gloo channel (:class:`..calls.CallCheck`), before any data moves:

- the operation with the filters present and ``top_n``, ``M`` and the shard's dtype;
- whether this rank rejected its own input;
- a fingerprint (int64) of the shard's width and of every per-row argument:
  temperature, seed, positions, top_k, top_p, min_p, or the token ids.

Any difference, or a rejection on any rank, raises the same ``ValueError`` on every rank
at that call, chained to the local error where there is one; every rank counted the call,
so the object stays usable. The fingerprint reads the argument tensors' bits on their
device and costs one host sync per call (the value checks of ``check_values=True``, the
default, already cost one); during CUDA graph capture it is not read (0).

Without ``check_calls`` a rank that rejects its input raises alone: its peers cannot know.
A peer that accepted the same call goes on into the call's exchange and waits there; it
pairs with this rank's next call on the same sampler when that call exchanges as many
rows (and returns tokens built from two different calls), else it waits until
``timeout_s`` (gloo) or the process group's timeout (NCCL). The local error says so.
"""

from __future__ import annotations

import struct

import torch
import torch.distributed as dist

from ..calls import CallCheck
from .checks import capturing

GREEDY, SAMPLE, LOGPROBS = 1, 2, 3
_NAMES = {GREEDY: "greedy", SAMPLE: "sample", LOGPROBS: "logprobs"}
_MASK = (1 << 64) - 1
_KINDS = {type(None): 1, bool: 2, int: 3, float: 4}  # fixed: str hashes vary by process
_HINT = (
    " [only this rank may have rejected this call: without check_calls its peers go on "
    "into the call's exchange, pair with this rank's next call or wait until their "
    "timeout; check_calls=True (or LOGITS_GATHER_CHECK_CALLS=1) makes every rank raise "
    "here instead]"
)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as int64 bit patterns (floats by their bits, not their values)."""
    t = t.detach().reshape(-1)
    if t.dtype.is_floating_point:
        t = t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])
    return t.to(torch.int64)


def _scalar(value: object) -> int:
    if value is None:
        return 0x5A5A5A5A
    if isinstance(value, float):
        return struct.unpack("<q", struct.pack("<d", value))[0]
    return int(value)  # int, bool


def fingerprint(values: tuple) -> int:
    """An int64 that differs, but for hash collisions, between argument tuples that
    differ in a type, a shape or a bit. One host sync when ``values`` hold tensors."""
    words, sums = [], []
    for v in values:
        if isinstance(v, torch.Tensor):
            bits = _bits(v)
            weights = torch.arange(1, bits.numel() + 1, dtype=torch.int64, device=bits.device)
            sums.append((bits * (weights * 0x9E3779B1 + 1)).sum())
            words.append(len(v.shape) * 1_000_003 + v.numel())
        else:
            words.append(_scalar(v))
            words.append(_KINDS.get(type(v), 0))
    if sums:
        words += torch.stack(sums).tolist()
    h = 0xCBF29CE484222325
    for w in words:
        h = ((h ^ (w & _MASK)) * 0x100000001B3) & _MASK
    return h - (1 << 64) if h >= 1 << 63 else h


def operation(op: int, values: tuple) -> tuple[int, str]:
    """The record's operation word, and the words for it: the filters present with
    ``sample`` (top_k, top_p, min_p), ``top_n`` with ``logprobs``."""
    words = _NAMES[op]
    code = op
    if op == SAMPLE and len(values) >= 6:
        present = [
            name
            for name, v in zip(("top_k", "top_p", "min_p"), values[3:6], strict=True)
            if v is not None
        ]
        code += sum(16 << i for i, v in enumerate(values[3:6]) if v is not None)
        words += f"({', '.join(present) or 'no filter'})"
    if op == LOGPROBS and len(values) >= 2 and isinstance(values[1], int):
        code += values[1] << 8
        words += f"(top_n={values[1]})"
    return code, words


class Agreement:
    """The per-call check of one sampler (or of the sampling functions on one group)."""

    def __init__(
        self, group: dist.ProcessGroup | None, *, timeout_s: float, device: torch.device
    ) -> None:
        self._check = CallCheck(
            group,
            timeout_s=timeout_s,
            columns=0,
            capacity=0,
            dtype=None,
            device=device,
            owner="logits_gather.sampling",
        )

    def __call__(self, shard: object, error: Exception | None, op: int, values: tuple) -> None:
        code, words = operation(op, values)
        ok = error is None
        if ok and isinstance(shard, torch.Tensor):
            words += f", N={shard.shape[1]}"
        # During CUDA graph capture no value can be read: the rest of the record is checked.
        readable = ok and not capturing(shard.device)
        stamp = fingerprint((shard.shape[1],) + values) if readable else 0
        self._check(shard, ok, error=error, op=code, fingerprint=stamp, what=words)


def settle(
    agreement: Agreement | None,
    world_size: int,
    shard: object,
    error: Exception | None,
    op: int,
    values: tuple,
) -> None:
    """Returns when the call may go on; else raises: the same error on every rank with an
    ``agreement``, this rank's own error (with a note on its peers) without one."""
    if agreement is not None:
        agreement(shard, error, op, values)
    elif error is not None:
        if world_size > 1:
            raise type(error)(f"{error}{_HINT}") from error
        raise error


def collective(what: str) -> None:
    """Raises when ``torch.distributed`` is not initialised (or its group was destroyed)."""
    if not dist.is_initialized():
        raise RuntimeError(
            f"{what} was called without an initialised torch.distributed process group (or "
            "after dist.destroy_process_group()): call init_process_group first, and build "
            "samplers anew after re-initialising (sampling.free_samplers() drops the cached "
            "ones)"
        )


__all__ = ["GREEDY", "LOGPROBS", "SAMPLE", "Agreement", "collective", "fingerprint", "settle"]
