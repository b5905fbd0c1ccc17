"""LogitsGather.linear on gloo ranks (CPU): F.linear + the gather, the contract, errors."""

from __future__ import annotations

import logging
import random

import pytest
import torch
import torch.nn.functional as F

from logits_gather import LogitsGather
from logits_gather.head import table
from scripts.support.dist import run_ranks
from tests.support.data import mismatch, same_bits

H = 48


def _weights(seed: int, world: int, columns: int, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(world * columns, H, generator=gen).to(dtype)


def _linear_calls(rank: int, world: int, dtype: torch.dtype, columns: int, check: bool) -> str:
    capacity = 9
    g = LogitsGather(columns, capacity, device="cpu", dtype=dtype, check_calls=check)
    full_w = _weights(7, world, columns, dtype)
    weight = full_w[rank * columns : (rank + 1) * columns].contiguous()
    rng = random.Random(99)  # the same M sequence on every rank
    previous = None
    for call in range(20):
        m = rng.randint(1, capacity)
        gen = torch.Generator().manual_seed(1000 + call)
        hidden = torch.randn(m, H, generator=gen).to(dtype)
        fused = (None, False)[call % 2]
        out = g.linear(hidden, weight, fused=fused)
        expected = torch.cat(
            [F.linear(hidden, full_w[r * columns : (r + 1) * columns]) for r in range(world)], 1
        )
        assert out.shape == (m, world * columns)
        assert same_bits(out, expected), f"call {call} m={m}: {mismatch(out, expected)}"
        if previous is not None:  # call k's result survives call k + 1, gathers included
            assert same_bits(*previous), f"call {call - 1} changed by call {call}"
        if call % 4 == 1:  # a plain gather in between counts as a call of the same object
            shard = torch.randn(m, columns, generator=gen).to(dtype)
            g(shard)
            previous = None
        else:
            previous = (out, expected.clone())
        assert not out.requires_grad
    return g.backend


@pytest.mark.parametrize("world", [1, 2, 4])
def test_linear_is_f_linear_then_gather(world: int) -> None:
    for dtype in (torch.bfloat16, torch.float32):
        run_ranks(_linear_calls, world, dtype, 24, False)
    run_ranks(_linear_calls, world, torch.float16, 16, world == 2)


def _grad_inputs(rank: int, world: int) -> None:
    g = LogitsGather(8, 4, device="cpu", dtype=torch.float32)
    weight = torch.randn(8, H, requires_grad=True)
    hidden = torch.randn(3, H, requires_grad=True)
    out = g.linear(hidden, weight)
    assert not out.requires_grad and out.grad_fn is None
    noncontig = torch.randn(H, 3).t()  # strided hidden: still served
    assert g.linear(noncontig, weight.detach()).shape == (3, world * 8)


def test_autograd_and_strided_inputs() -> None:
    run_ranks(_grad_inputs, 2)


BAD = {
    "hidden type": (lambda w: ([1.0], w), {}, TypeError, "hidden must be a torch.Tensor"),
    "weight type": (lambda w: (torch.ones(2, H), None), {}, TypeError, "weight must be"),
    "hidden dtype": (
        lambda w: (torch.ones(2, H, dtype=torch.float16), w),
        {},
        TypeError,
        "hidden.dtype must be torch.float32",
    ),
    "weight dtype": (lambda w: (torch.ones(2, H), w.double()), {}, TypeError, "weight.dtype"),
    "hidden 1-D": (lambda w: (torch.ones(H), w), {}, ValueError, "hidden must be 2-D"),
    "M=0": (lambda w: (torch.ones(0, H), w), {}, ValueError, "got 0"),
    "M > capacity": (lambda w: (torch.ones(5, H), w), {}, ValueError, "1..4 (capacity), got 5"),
    "columns": (lambda w: (torch.ones(2, H), w[:5]), {}, ValueError, "columns=8"),
    "H": (lambda w: (torch.ones(2, H + 1), w), {}, ValueError, "hidden.shape[1]=49"),
    "device": (lambda w: (torch.ones(2, H, device="meta"), w), {}, ValueError, "hidden.device"),
    "fused": (lambda w: (torch.ones(2, H), w), {"fused": 1}, TypeError, "fused must be None"),
    "fused impossible": (
        lambda w: (torch.ones(2, H), w),
        {"fused": True},
        ValueError,
        "fused=True) is impossible",
    ),
}


def _bad_inputs(rank: int, world: int, check: bool) -> None:
    g = LogitsGather(8, 4, device="cpu", dtype=torch.float32, check_calls=check)
    weight = torch.randn(8, H)
    for name, (make, kwargs, exc, text) in BAD.items():
        args = make(weight)
        error = ValueError if check and name != "fused impossible" else exc
        with pytest.raises(error) as info:
            g.linear(*args, **kwargs)
        message = str(info.value) + str(info.value.__cause__ or "")
        assert text in message, f"{name}: {message}"
        hidden = torch.randn(2, H)  # the object stays usable
        out = g.linear(hidden, weight)
        assert out.shape == (2, world * 8)


@pytest.mark.parametrize("check", [False, True])
def test_bad_inputs_raise_and_leave_the_object_usable(check: bool) -> None:
    run_ranks(_bad_inputs, 2, check)


def _one_rank_rejected(rank: int, world: int) -> None:
    g = LogitsGather(8, 4, device="cpu", dtype=torch.float32, check_calls=True)
    weight = torch.randn(8, H)
    hidden = torch.randn(2, H if rank == 0 else H + 16)
    bad_weight = weight if rank == 0 else torch.randn(8, H + 16)
    with pytest.raises(ValueError, match="operation differs between ranks"):
        g.linear(hidden, bad_weight)
    with pytest.raises(ValueError, match="operation differs between ranks"):
        if rank == 0:
            g.linear(torch.randn(2, H), weight)
        else:
            g(torch.randn(2, 8))
    assert g.linear(torch.randn(3, H), weight).shape == (3, world * 8)


def test_check_calls_catches_a_different_hidden_size_or_operation() -> None:
    run_ranks(_one_rank_rejected, 2)


def _fallback_logged(rank: int, world: int) -> list[str]:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("logits_gather.head")
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    g = LogitsGather(8, 4, device="cpu", dtype=torch.float32)
    for _ in range(3):
        g.linear(torch.randn(2, H), torch.randn(8, H))
    return records


def test_the_reason_for_cublas_is_logged_once() -> None:
    for records in run_ranks(_fallback_logged, 2):
        reasons = [r for r in records if "F.linear (cuBLAS) + the gather" in r]
        assert len(reasons) == 1, records
        assert "torch.distributed fallback" in reasons[0]


def test_table_is_a_pure_function_of_shared_arguments() -> None:
    for m in (1, 4, 16, 64, 128, 256, 300):
        for h, columns in ((4096, 75776), (5120, 18944), (7168, 37888), (4112, 1024)):
            a = table.pick(m, h, columns, forced=True)
            assert a == table.pick(m, h, columns, forced=True)
            assert a is not None and h % a.bk == 0 and a.bk >= 16
            assert a.grid(m, columns, 132) <= 132
    assert table.tiles(256, 5120, 18944)
