"""LogitsGather on gloo ranks (CPU): exactness, lifetime, errors, agreement."""

from __future__ import annotations

import random
import re

import pytest
import torch

from logits_gather import LogitsGather
from scripts.support.dist import run_ranks
from tests.support.data import mismatch, random_bits, same_bits

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _exact_over_calls(rank: int, world: int, dtype: torch.dtype, columns: int) -> str:
    capacity = 9
    g = LogitsGather(columns=columns, capacity=capacity, device="cpu", dtype=dtype)
    assert g.backend == ("torch.distributed" if world > 1 else g.backend)
    assert (g.world_size, g.rank) == (world, rank)
    rng = random.Random(1234)  # same M sequence on every rank
    previous = None
    for call in range(24):
        m = rng.randint(1, capacity)
        full = random_bits(10_000 * call + columns, (m, world * columns), dtype)
        shard = full[:, rank * columns : (rank + 1) * columns].contiguous()
        out = g(shard)
        if world == 1:
            assert out is shard
        assert same_bits(out, full), f"call {call} m={m}: {mismatch(out, full)}"
        if previous is not None:  # call k's result survives call k + 1
            assert same_bits(*previous), f"call {call - 1} result changed by call {call}"
        previous = (out, full)
    return g.backend


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_exact_all_dtypes(world: int) -> None:
    for dtype in DTYPES:
        run_ranks(_exact_over_calls, world, dtype, 7 if dtype != torch.float16 else 1001)


def _no_copy_of_result(rank: int, world: int) -> None:
    g = LogitsGather(columns=5, capacity=4, device="cpu", dtype=torch.float32)
    storages = set()
    for call in range(6):
        out = g(random_bits(call, (3, 5), torch.float32))
        storages.add(out.untyped_storage().data_ptr())
    assert len(storages) == 1, "every result should be a view of the preallocated slots"
    assert g._impl.slots.untyped_storage().data_ptr() in storages


def test_results_are_views_of_preallocated_buffers() -> None:
    run_ranks(_no_copy_of_result, 2)


BAD_SHARDS = {
    "dtype": (lambda: torch.ones(2, 6, dtype=torch.float16), TypeError, "shard.dtype"),
    "not a tensor": (lambda: [[1.0] * 6], TypeError, "torch.Tensor"),
    "1-D": (lambda: torch.ones(6), ValueError, "2-D"),
    "3-D": (lambda: torch.ones(1, 2, 6), ValueError, "2-D"),
    "columns": (lambda: torch.ones(2, 5), ValueError, "columns=6, got 5"),
    "M=0": (lambda: torch.ones(0, 6), ValueError, "got 0"),
    "M>capacity": (lambda: torch.ones(5, 6), ValueError, "1..4 (capacity), got 5"),
    "non-contiguous": (lambda: torch.ones(6, 2).t(), ValueError, "contiguous"),
}


def _bad_inputs(rank: int, world: int) -> None:
    g = LogitsGather(columns=6, capacity=4, device="cpu", dtype=torch.float32)
    for name, (make, kind, text) in BAD_SHARDS.items():
        with pytest.raises(kind, match=re.escape(text)):
            g(make())
        # the object stays usable after a rejected call
        full = random_bits(len(name), (3, 6 * world), torch.float32)
        assert same_bits(g(full[:, rank * 6 : (rank + 1) * 6].contiguous()), full), name


def test_bad_inputs_raise_on_every_rank() -> None:
    run_ranks(_bad_inputs, 2)


def _mismatch(rank: int, world: int, field: str) -> str:
    kwargs = dict(columns=8, capacity=4, device="cpu", dtype=torch.float32)
    if rank == world - 1:
        kwargs[field] = {"columns": 9, "capacity": 5, "dtype": torch.bfloat16}[field]
    with pytest.raises(ValueError, match=f"{field} differs between ranks") as info:
        LogitsGather(**kwargs)
    return str(info.value)


@pytest.mark.parametrize("field", ["columns", "capacity", "dtype"])
def test_construction_mismatch_raises_everywhere(field: str) -> None:
    messages = run_ranks(_mismatch, 3, field, timeout=120)
    assert len(set(messages)) == 1, "every rank should raise the same error"


def _invalid_on_one_rank(rank: int, world: int) -> None:
    columns = 0 if rank == 1 else 8
    with pytest.raises(ValueError, match=r"rank 1: columns must be a positive int, got 0"):
        LogitsGather(columns=columns, capacity=4, device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match=r"backend must be one of"):
        LogitsGather(columns=8, capacity=4, device="cpu", backend="nccl")
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        LogitsGather(columns=8, capacity=4, device="cpu", dtype=torch.int32)
    with pytest.raises(ValueError, match=r"timeout_s"):
        LogitsGather(columns=8, capacity=4, device="cpu", timeout_s=-1)
    bad_device = "no-such-device" if rank == 0 else "cpu"
    with pytest.raises(ValueError, match=r"rank 0: device must name a torch device"):
        LogitsGather(columns=8, capacity=4, device=bad_device)


def test_invalid_arguments_raise_on_every_rank() -> None:
    run_ranks(_invalid_on_one_rank, 2)


def _forced_symm_mem_on_cpu(rank: int, world: int) -> None:
    with pytest.raises(RuntimeError, match=r"backend='symm_mem' is impossible.*not CUDA"):
        LogitsGather(columns=8, capacity=4, device="cpu", backend="symm_mem")
    g = LogitsGather(columns=8, capacity=4, device="cpu", backend="torch.distributed")
    assert g.backend == "torch.distributed"


def test_symm_mem_backend_raises_with_reason_on_cpu() -> None:
    run_ranks(_forced_symm_mem_on_cpu, 2)


def test_needs_initialised_process_group() -> None:
    with pytest.raises(RuntimeError, match="init_process_group"):
        LogitsGather(columns=8, capacity=4, device="cpu")


def _logs_reason_once(rank: int, world: int) -> list[str]:
    import logging

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("logits_gather")
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())
    for _ in range(3):
        g = LogitsGather(columns=8, capacity=4, device="cpu")
        assert g.backend == "torch.distributed"
    return records


def test_auto_logs_the_fallback_reason_once() -> None:
    for records in run_ranks(_logs_reason_once, 2):
        assert len(records) == 1, records
        assert "fallback because" in records[0] and "not CUDA" in records[0], records
