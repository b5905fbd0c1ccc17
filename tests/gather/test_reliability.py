"""Misuse on gloo ranks (CPU): options, autograd, foreign devices, trap translation,
timeouts and setup failures. Every error must name the argument and the value, be the
same on every rank, and no rank may hang. The call check has its own file."""

from __future__ import annotations

import os
import re
import time

import pytest
import torch

from logits_gather import LogitsGather, PeerTimeoutError
from scripts.support.dist import run_ranks
from tests.support.data import random_bits, same_bits

KW = dict(columns=6, capacity=4, device="cpu", dtype=torch.float32)


def _shard(seed: int, rank: int, world: int, m: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    full = random_bits(seed, (m, 6 * world), torch.float32)
    return full[:, rank * 6 : (rank + 1) * 6].contiguous(), full


def _raises_everywhere(rank: int, make, match: str, kind=ValueError) -> str:
    with pytest.raises(kind, match=match) as info:
        make()
    return str(info.value)


def _options(rank: int, world: int) -> list[str]:
    messages = []
    cases = [
        (
            dict(on_timeout="abort" if rank == 1 else "raise"),
            r"rank 1: on_timeout must be one of \('raise', 'trap'\), got 'abort'",
        ),
        (
            dict(check_calls="yes" if rank == 0 else None),
            r"rank 0: check_calls must be a bool or None, got 'yes'",
        ),
        (
            dict(on_timeout="trap" if rank == 0 else "raise"),
            r"on_timeout differs between ranks: rank 0='trap', rank 1='raise'",
        ),
        (dict(check_calls=rank == 1), r"check_calls differs between ranks"),
        (
            dict(device="cuda" if rank == 1 else "cpu"),
            r"rank 1: device='cuda' asks for CUDA, but there is no CUDA here: this torch build",
        ),
        (dict(device="meta"), r"rank 0: device must hold data \(cpu or cuda\), got 'meta'"),
        (dict(timeout_s=0), r"timeout_s must be a number of seconds in \(0, 2000\], got 0"),
    ]
    for extra, match in cases:
        build = lambda e=extra: LogitsGather(**{**KW, **e})  # noqa: E731
        messages.append(_raises_everywhere(rank, build, match))
    env = [
        ("LOGITS_GATHER_ON_TIMEOUT", "never", r"LOGITS_GATHER_ON_TIMEOUT must be one of"),
        (
            "LOGITS_GATHER_CHECK_CALLS",
            "true",
            r"LOGITS_GATHER_CHECK_CALLS must be 0 or 1, "
            r"got 'true'",
        ),
        ("LOGITS_GATHER_TIMEOUT_S", "soon", r"LOGITS_GATHER_TIMEOUT_S must be a number"),
    ]
    for name, value, match in env:
        os.environ[name] = value
        messages.append(_raises_everywhere(rank, lambda: LogitsGather(**KW), match))
        del os.environ[name]
    os.environ.update(LOGITS_GATHER_ON_TIMEOUT="raise", LOGITS_GATHER_CHECK_CALLS="1")
    g = LogitsGather(**KW)
    assert (g.on_timeout, g.check_calls) == ("raise", True), repr(g)
    del os.environ["LOGITS_GATHER_ON_TIMEOUT"], os.environ["LOGITS_GATHER_CHECK_CALLS"]
    g = LogitsGather(**KW)
    assert (g.on_timeout, g.check_calls) == ("trap", False), "documented defaults"
    with pytest.raises(
        TypeError,
        match=r"group must be a torch.distributed ProcessGroup or "
        r"None, got str",
    ):
        LogitsGather(**KW, group="tp")
    return messages


def _autograd_and_devices(rank: int, world: int) -> None:
    g = LogitsGather(**KW)
    for call in range(40):
        shard, full = _shard(call, rank, world)
        if call % 3 == 0:
            shard.requires_grad_()
        out = g(shard) if call % 5 else _no_grad(g, shard)
        assert not out.requires_grad and out.grad_fn is None, f"call {call}: {out.grad_fn}"
        assert same_bits(out, full.detach()), f"call {call}"
    impl = g._impl
    assert not impl.slots.requires_grad and not impl._staging.requires_grad
    meta = torch.empty(3, 6, device="meta")
    with pytest.raises(
        ValueError,
        match=r"shard.device must be cpu \(this object's device\), "
        r"got meta",
    ):
        g(meta)
    shard, full = _shard(99, rank, world)  # still usable, still exact
    assert same_bits(g(shard), full)


def _no_grad(g: LogitsGather, shard: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return g(shard)


class _TrappedKernel:
    """Stands in for PushGather after a device trap: the status block is written and
    every CUDA call fails with the sticky error."""

    def __init__(self) -> None:
        self._status_words = [0, 0, 0, 0]

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("CUDA error: unspecified launch failure")

    def recorded_timeout(self) -> PeerTimeoutError | None:
        if not self._status_words[0]:
            return None
        return PeerTimeoutError(f"timed out at the exit barrier: status {self._status_words}")


def _trap_translation(rank: int, world: int, monkeypatch: pytest.MonkeyPatch) -> None:
    g = LogitsGather(**KW, on_timeout="trap")
    g._impl = fake = _TrappedKernel()
    shard, _ = _shard(0, rank, world)
    with pytest.raises(RuntimeError, match="unspecified launch failure") as info:
        g(shard)  # no timeout recorded: the CUDA error is not ours and passes unchanged
    assert type(info.value) is RuntimeError
    g.check()
    fake._status_words[:] = [1, 3, 4, 6]
    with pytest.raises(PeerTimeoutError, match=r"status \[1, 3, 4, 6\]") as info:
        g(shard)
    assert "unspecified launch failure" in str(info.value.__cause__)
    for _ in range(2):  # the object stays failed, and says why, without touching CUDA
        with pytest.raises(PeerTimeoutError, match=r"status \[1, 3, 4, 6\]"):
            g(shard)
        with pytest.raises(PeerTimeoutError, match=r"status \[1, 3, 4, 6\]"):
            g.check()
    # check() on a CUDA object synchronises; a trapped context makes that raise
    h = LogitsGather(**KW, on_timeout="trap")
    h._impl, h.device = _TrappedKernel(), torch.device("cuda", 0)

    def sync(device=None) -> None:
        raise RuntimeError("CUDA error: unspecified launch failure")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "synchronize", sync)
    with pytest.raises(RuntimeError, match="unspecified launch failure"):
        h.check()  # not a timeout of ours: re-raised unchanged
    h._impl._status_words[:] = [2, 0, 1, 2]
    # after a real trap even the capture query raises the sticky error
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", sync)
    with pytest.raises(PeerTimeoutError, match=r"status \[2, 0, 1, 2\]") as info:
        h.check()
    assert isinstance(info.value.__cause__, RuntimeError)


def _misuse(rank: int, world: int) -> list[str]:
    messages = _options(rank, world)
    _autograd_and_devices(rank, world)
    with pytest.MonkeyPatch.context() as mp:
        _trap_translation(rank, world, mp)
    return messages


def test_misuse_options_autograd_devices_and_trap_translation() -> None:
    """Bad options raise the same error everywhere; outputs never carry autograd
    history; meta shards are rejected; a trapped kernel becomes PeerTimeoutError."""
    per_rank = run_ranks(_misuse, 2)
    assert per_rank[0] == per_rank[1]


def _fallback_timeout(rank: int, world: int) -> float:
    g = LogitsGather(**KW, timeout_s=1.0)
    shard, full = _shard(1, rank, world)
    assert same_bits(g(shard), full)
    waited = 0.0
    if rank == 0:
        started = time.monotonic()
        with pytest.raises(  # each call first exchanges M (ranks must agree on it)
            PeerTimeoutError,
            match=r"did not join the all-gather of the row count \(M=3\) "
            r"within timeout_s=1 s",
        ):
            g(shard)
        waited = time.monotonic() - started
        for _ in range(2):  # unusable from now on, and says so at once
            with pytest.raises(PeerTimeoutError, match="within timeout_s=1 s"):
                g(shard)
            with pytest.raises(PeerTimeoutError, match="within timeout_s=1 s"):
                g.check()
    else:
        time.sleep(3.0)
        # rank 1's late call pairs with rank 0's abandoned row-count exchange and then
        # finds nobody in the all-gather: it times out there instead of hanging
        with pytest.raises(PeerTimeoutError, match="did not join the all-gather of M=3 rows"):
            g(shard)
    # no barrier: rank 1's abandoned all-gather still occupies the gloo group
    return waited


def _skipped_for_good(rank: int, world: int) -> float:
    g = LogitsGather(**KW, check_calls=True, timeout_s=1.0)
    shard, full = _shard(2, rank, world)
    assert same_bits(g(shard), full)
    waited = 0.0
    if rank == 0:  # rank 1 skips this call: rank 0 times out in the check, not in gloo
        started = time.monotonic()
        with pytest.raises(
            PeerTimeoutError,
            match=r"not every rank reached call 1 of checked "
            r"object #0 within timeout_s=1 s",
        ):
            g(shard)
        waited = time.monotonic() - started
        with pytest.raises(PeerTimeoutError, match="call 1 of checked object"):
            g(shard)  # unusable from now on
    else:
        time.sleep(2.5)
        # rank 1's late call pairs with rank 0's abandoned check and then finds nobody in
        # the all-gather: it times out there instead of hanging
        with pytest.raises(PeerTimeoutError, match="did not join the all-gather"):
            g(shard)
    # no barrier: rank 1's abandoned all-gather still occupies the gloo group
    return waited


def test_timeouts_end_in_errors_not_hangs() -> None:
    """The gloo fallback honours timeout_s; a call that one rank skips for good ends in
    PeerTimeoutError on both ranks, with and without the call check. Each case leaves the
    group out of step, so each runs on ranks of its own."""
    fallback = run_ranks(_fallback_timeout, 2, timeout=90)[0]
    check = run_ranks(_skipped_for_good, 2, timeout=90)[0]
    assert 0.9 < fallback < 2.5, f"rank 0 waited {fallback:.2f} s with timeout_s=1"
    assert 0.9 < check < 2.5, f"rank 0 waited {check:.2f} s in the call check"


def _fallback_oom(rank: int, world: int, monkeypatch: pytest.MonkeyPatch) -> str:
    import logits_gather.gather as gather_mod

    real = gather_mod.DistributedGather

    def flaky(**kwargs):
        if rank == 1:
            raise torch.OutOfMemoryError("could not allocate 1.50 GiB")
        return real(**kwargs)

    monkeypatch.setattr(gather_mod, "DistributedGather", flaky)
    return _raises_everywhere(
        rank,
        lambda: LogitsGather(**KW),
        re.escape(
            "could not allocate the torch.distributed fallback's buffers: rank 1: "
            "OutOfMemoryError: could not allocate 1.50 GiB"
        ),
        RuntimeError,
    )


def _symm_mem_oom(rank: int, world: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Drives the real construction path down to symmetric.allocate on CPU, with fakes
    for what needs a GPU; symm_mem.empty fails on rank 1 only."""
    import sys
    import types

    import torch.distributed._symmetric_memory as symm_mem

    import logits_gather.symmetric as symmetric

    monkeypatch.setattr(symmetric, "local_problem", lambda device: None)
    monkeypatch.setattr(
        symmetric,
        "describe_device",
        lambda device: {"host": "h", "uuid": f"gpu{rank}", "index": rank, "sms": 8},
    )
    monkeypatch.setattr(symmetric, "peer_problem", lambda me, infos: None)
    monkeypatch.setitem(sys.modules, "logits_gather.kernel", types.SimpleNamespace(FLAG_ROWS=4))
    monkeypatch.setitem(
        sys.modules,
        "logits_gather.push",
        types.SimpleNamespace(EAGER_SLOTS=3, GRAPH_SLOTS=2, PushGather=None),
    )
    rendezvous: list[int] = []

    def empty(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if rank == 1 and dtype != torch.int32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.20 GiB")
        return torch.empty(n, dtype=dtype, device=device)

    monkeypatch.setattr(symm_mem, "empty", empty)
    monkeypatch.setattr(symm_mem, "rendezvous", lambda t, g: rendezvous.append(1))
    monkeypatch.setattr(symm_mem, "enable_symm_mem_for_group", lambda name: None, raising=False)
    messages = [
        _raises_everywhere(
            rank,
            lambda: LogitsGather(**KW, backend="symm_mem"),
            r"backend='symm_mem' failed to set up: AllocationError: symmetric-memory allocation "
            r"\(5 slots x 4 x 18 torch.float32 per rank\) failed on rank 1: OutOfMemoryError: "
            r"CUDA out of memory",
            RuntimeError,
        )
    ]
    g = LogitsGather(**KW, backend="auto")  # falls back on every rank, and works
    assert g.backend == "torch.distributed"
    shard, full = _shard(7, rank, world)
    assert same_bits(g(shard), full)
    assert not rendezvous, "no rank may enter the rendezvous after a failed allocation"
    return messages


def _setup_failures(rank: int, world: int) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        messages = [_fallback_oom(rank, world, mp)]
    g = LogitsGather(**KW)  # the group is still in step
    shard, full = _shard(5, rank, world)
    assert same_bits(g(shard), full)
    with pytest.MonkeyPatch.context() as mp:
        messages += _symm_mem_oom(rank, world, mp)
    return messages


def test_allocation_failure_on_one_rank_strands_nobody() -> None:
    """An allocation that fails on one rank (the fallback's, or symm_mem.empty before the
    rendezvous) raises the same error on every rank; auto falls back everywhere."""
    messages = run_ranks(_setup_failures, 3)
    assert messages[0] == messages[1] == messages[2]
