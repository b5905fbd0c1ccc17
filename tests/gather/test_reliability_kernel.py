"""Misuse on the kernel path (GPU): autograd inputs, meta tensors, an allocation that
fails on one rank, and mismatched calls caught by ``check_calls``."""

from __future__ import annotations

import pytest
import torch

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from scripts.support.placement import placement_env, rank_device
from tests.support.gpu import assert_bits, random_full, two_rank_placement

pytestmark = pytest.mark.gpu
COLUMNS = 2048


def _grad_and_meta(rank: int, world: int, placement: str) -> None:
    device = rank_device(rank, placement)
    g = LogitsGather(columns=COLUMNS, capacity=4, device=device, on_timeout="raise", timeout_s=20.0)
    assert g.backend == "symm_mem", g.backend
    gen = torch.Generator(device=device).manual_seed(3)
    for _ in range(3):
        full = random_full(gen, 3, world * COLUMNS, torch.float32, device).nan_to_num_(0.0)
        full = full.to(torch.bfloat16)
        shard = full[:, rank * COLUMNS : (rank + 1) * COLUMNS].contiguous().requires_grad_()
        out = g(shard)
        assert out.grad_fn is None and not out.requires_grad
        assert_bits(out, full, "gather of a requires_grad shard")
        plain = g(shard.detach())
        assert plain.grad_fn is None and not plain.requires_grad
    with pytest.raises(ValueError, match="device"):
        g(torch.empty(2, COLUMNS, dtype=torch.bfloat16, device="meta"))
    g.check()


def test_autograd_input_and_meta_tensor() -> None:
    p = two_rank_placement()
    run_ranks(_grad_and_meta, 2, p, env=placement_env(p), timeout=180)


def _alloc_fails(rank: int, world: int, placement: str, backend: str) -> str:
    import torch.distributed._symmetric_memory as symm_mem

    device = rank_device(rank, placement)
    if rank == 1:

        def boom(*args, **kwargs):
            raise torch.OutOfMemoryError("simulated: out of memory on rank 1")

        symm_mem.empty = boom
    try:
        g = LogitsGather(columns=COLUMNS, capacity=4, device=device, backend=backend)
    except Exception as exc:  # noqa: BLE001 - the verdict goes back to the test
        return f"raised {type(exc).__name__}: {exc}"
    return f"built {g.backend}"


@pytest.mark.parametrize("backend", ["auto", "symm_mem"])
def test_allocation_failure_on_one_rank(backend: str) -> None:
    p = two_rank_placement()
    # hard_exit: rank 0's unrendezvoused symmetric block must not be freed at teardown,
    # where torch would wait for peers that never mapped it.
    verdicts = run_ranks(
        _alloc_fails, 2, p, backend, env=placement_env(p), timeout=120, hard_exit=True
    )
    if backend == "auto":
        assert verdicts == ["built torch.distributed"] * 2, verdicts
    else:
        assert all(v.startswith("raised") and "rank 1" in v for v in verdicts), verdicts


def _mismatch(rank: int, world: int, placement: str) -> str:
    device = rank_device(rank, placement)
    g = LogitsGather(
        columns=COLUMNS,
        capacity=8,
        device=device,
        check_calls=True,
        on_timeout="raise",
        timeout_s=20.0,
    )
    x = torch.ones(2 + rank, COLUMNS, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError) as info:
        g(x)
    y = torch.full((3, COLUMNS), float(rank), dtype=torch.bfloat16, device=device)
    out = g(y)  # every rank agrees again: the object is still usable
    torch.cuda.synchronize()
    assert out[:, (1 - rank) * COLUMNS].eq(1 - rank).all()
    return str(info.value)


def test_check_calls_catches_different_m() -> None:
    p = two_rank_placement()
    messages = run_ranks(_mismatch, 2, p, env=placement_env(p), timeout=120)
    assert messages[0] == messages[1] and "M" in messages[0], messages
