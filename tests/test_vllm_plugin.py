"""The vLLM plugin against the real vLLM, on its CPU platform, with 2 and 4 gloo ranks.

Each rank builds vLLM's world and TP groups with ``init_distributed_environment``
and ``initialize_model_parallel``, loads general plugins with
``load_general_plugins()`` (so ``logits_gather`` must be installed with its entry
point: ``pip install -e .[vllm]``), and builds ``LogitsProcessor`` and
``ParallelLMHead`` through their normal constructors. Results are compared bit
for bit with vLLM's own class on the same inputs. ``VLLM_TARGET_DEVICE=cpu``
selects vLLM's CPU platform even with a CUDA build of vLLM and torch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random

import pytest
import torch

from tests.data import mismatch, random_bits, same_bits
from tests.dist import run_ranks

pytestmark = pytest.mark.vllm
if os.environ.get("LOGITS_GATHER_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401 - CI's vLLM venv: a broken install must fail, not skip
else:
    pytest.importorskip("vllm", reason="needs the real vllm package (pip install -e .[vllm])")

VOCAB, HIDDEN, MAX_NUM_SEQS = 1000, 64, 6  # vLLM pads VOCAB to 1024
ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "logits_gather"}


@contextlib.contextmanager
def _vllm(rank: int, world_size: int):
    """vLLM's config context, its own distributed init (on the group run_ranks
    made) and plugin loading."""
    from vllm.config import SchedulerConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.plugins import load_general_plugins

    config = VllmConfig(scheduler_config=SchedulerConfig(
        max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=2048, max_model_len=2048,
        is_encoder_decoder=False))
    with set_current_vllm_config(config):
        init_distributed_environment(world_size=world_size, rank=rank, local_rank=rank,
                                     distributed_init_method="env://", backend="gloo")
        initialize_model_parallel(tensor_model_parallel_size=world_size)
        load_general_plugins()
        yield


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _collect(logger_name: str) -> list[str]:
    """The INFO messages that reach ``logger_name`` from now on in this rank."""
    handler = _Collect()
    logging.getLogger(logger_name).addHandler(handler)
    logging.getLogger(logger_name).setLevel(logging.INFO)
    return handler.messages


def _stock(cls, *args, **kwargs):
    """vLLM's own LogitsProcessor, built while the out-of-tree entry is lifted."""
    from vllm.model_executor.custom_op import op_registry_oot

    saved = op_registry_oot.pop(cls.__name__, None)
    try:
        return cls(*args, **kwargs)
    finally:
        if saved is not None:
            op_registry_oot[cls.__name__] = saved


def _head(seed: int, rank: int, dtype: torch.dtype):
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    head = ParallelLMHead(VOCAB, HIDDEN, params_dtype=dtype)
    gen = torch.Generator().manual_seed(seed + 1000 + rank)
    head.weight.data.copy_(torch.randn(head.weight.shape, generator=gen).to(dtype))
    head.quant_method.process_weights_after_loading(head)
    return head


def _replaced_rank(rank: int, world_size: int, seed: int, capacity: int) -> dict[str, dict]:
    from vllm.model_executor.custom_op import op_registry_oot

    from logits_gather.vllm_processor import GatherLogitsProcessor

    messages = _collect("logits_gather")
    with _vllm(rank, world_size):
        assert op_registry_oot.get("LogitsProcessor") is GatherLogitsProcessor, (
            "vLLM did not load the logits_gather plugin: is its vllm.general_plugins entry "
            "point installed (pip install -e .[vllm])?")
        counts = _forward_matches(rank, world_size, seed, capacity)
        _gather_bits_and_copy(rank, world_size, seed, capacity)
    chosen = [m for m in messages if "gathers through LogitsGather" in m]  # once per dtype/copy
    assert len(chosen) == 4, messages
    assert all(f"backend=torch.distributed, tp={world_size}," in m for m in chosen), messages
    assert sum(f"more than {capacity} logit rows" in m for m in messages) == 1, messages
    return counts


def _forward_matches(rank: int, world_size: int, seed: int, capacity: int) -> dict[str, dict]:
    """Full ``forward`` through a real ``ParallelLMHead``, padded vocab, both
    slices, in-place scaling, sizes around the capacity."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from logits_gather.vllm_processor import GatherLogitsProcessor

    counts = {}
    for dtype in (torch.bfloat16, torch.float32):
        head = _head(seed, rank, dtype)
        assert head.tp_size == world_size and head.weight.shape[0] == 1024 // world_size
        for kwargs in ({}, {"org_vocab_size": VOCAB - 37, "scale": 0.5}):
            ours, stock = LogitsProcessor(VOCAB, **kwargs), _stock(LogitsProcessor, VOCAB, **kwargs)
            assert type(ours) is GatherLogitsProcessor and type(stock) is LogitsProcessor
            assert ours.gather_capacity == capacity
            previous = None
            for step, m in enumerate([1, capacity, 2, capacity + 1, 3, capacity, 1, 4]):
                hidden = torch.randn(m, HIDDEN, generator=torch.Generator().manual_seed(
                    seed + 17 * step)).to(dtype)  # the same on every TP rank, as in vLLM
                got, want = ours(head, hidden), stock(head, hidden)
                org = kwargs.get("org_vocab_size", VOCAB)
                assert got.shape == (m, org) and got.stride() == want.stride()
                assert same_bits(got, want), f"rank {rank} {dtype} step {step}: " + mismatch(
                    got, want)
                if previous is not None:  # call k is still intact after call k + 1
                    assert same_bits(*previous), f"rank {rank} step {step}: earlier result changed"
                previous = (got, want.clone())
            counts[f"{dtype}-{len(kwargs)}"] = dict(ours.gather_counts)
            assert ours._lg is not None and ours._lg.backend == "torch.distributed"
            assert not ours._copy
    return counts


def _gather_bits_and_copy(rank: int, world_size: int, seed: int, capacity: int) -> None:
    """``_gather_logits`` alone on every bit pattern (NaN, inf, subnormals), and
    the copy that fp32 ``processed_logits`` gets."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    for mode, dtype in ((None, torch.float16), ("processed_logits", torch.float32)):
        ours, stock = LogitsProcessor(VOCAB), _stock(LogitsProcessor, VOCAB)
        ours._logprobs_mode = mode
        kept = []
        for step in range(6):
            shard = random_bits(seed + 31 * step + rank, (capacity, 1024 // world_size), dtype)
            got, want = ours._gather_logits(shard), stock._gather_logits(shard)
            assert same_bits(got, want), f"rank {rank} {dtype} step {step}: " + mismatch(got, want)
            kept.append((got, want))
        assert ours.gather_counts == {"logits_gather": 6, "vllm": 0}
        assert ours._copy is (mode is not None)
        if ours._copy:  # copies outlive the library's next-but-one window
            assert all(same_bits(got, want) for got, want in kept), f"rank {rank}: a copy changed"


@pytest.mark.parametrize("world_size,capacity_env", [(2, None), (4, "5")])
def test_plugin_matches_vllm_bit_for_bit(world_size: int, capacity_env: str | None) -> None:
    env = dict(ENV, LOGITS_GATHER_VLLM_BACKEND="torch.distributed")
    if capacity_env:
        env["LOGITS_GATHER_VLLM_CAPACITY"] = capacity_env
    capacity = int(capacity_env or MAX_NUM_SEQS)
    seed = random.randrange(1 << 30)
    results = run_ranks(_replaced_rank, world_size, seed, capacity, env=env, timeout=300)
    for counts in results:  # 7 of 8 steps fit, every instance built its LogitsGather
        assert all(c == {"logits_gather": 7, "vllm": 1} for c in counts.values()), counts


def _auto_on_cpu_rank(rank: int, world_size: int, seed: int) -> dict[str, int]:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    messages = _collect("logits_gather")
    with _vllm(rank, world_size):
        head = _head(seed, rank, torch.float32)
        ours, stock = LogitsProcessor(VOCAB), _stock(LogitsProcessor, VOCAB)
        for step in range(3):
            hidden = torch.randn(4, HIDDEN, generator=torch.Generator().manual_seed(seed + step))
            assert same_bits(ours(head, hidden), stock(head, hidden))
        assert type(ours).__name__ == "GatherLogitsProcessor" and ours._lg is None
    assert any("keeps vLLM's all-gather because logits are on cpu" in m for m in messages)
    return ours.gather_counts


def test_auto_backend_keeps_vllm_gather_on_cpu() -> None:
    results = run_ranks(_auto_on_cpu_rank, 2, random.randrange(1 << 30), env=ENV, timeout=300)
    assert results == [{"logits_gather": 0, "vllm": 3}] * 2


def _disabled_rank(rank: int, world_size: int) -> str:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    messages = _collect("vllm")  # the plugin routes its records to vLLM's logger
    with _vllm(rank, world_size):
        name = type(LogitsProcessor(VOCAB)).__name__
    assert any("disabled by LOGITS_GATHER_VLLM_DISABLE" in m for m in messages), messages
    return name


def test_disable_env_leaves_vllm_stock() -> None:
    env = dict(ENV, LOGITS_GATHER_VLLM_DISABLE="1")
    assert run_ranks(_disabled_rank, 2, env=env, timeout=300) == ["LogitsProcessor"] * 2


def test_settings_from_env() -> None:
    from logits_gather.vllm_plugin import Settings

    assert Settings.from_env({}) == Settings(False, None, "auto")
    got = Settings.from_env({"LOGITS_GATHER_VLLM_DISABLE": "yes",
                             "LOGITS_GATHER_VLLM_CAPACITY": "64",
                             "LOGITS_GATHER_VLLM_BACKEND": "symm_mem"})
    assert got == Settings(True, 64, "symm_mem")
    for name, value in (("LOGITS_GATHER_VLLM_DISABLE", "maybe"),
                        ("LOGITS_GATHER_VLLM_CAPACITY", "0"),
                        ("LOGITS_GATHER_VLLM_CAPACITY", "many"),
                        ("LOGITS_GATHER_VLLM_BACKEND", "nccl")):
        with pytest.raises(ValueError, match=f"{name}.*{value}"):
            Settings.from_env({name: value})


def test_capacity_from_scheduler_and_speculative_config() -> None:
    from types import SimpleNamespace

    from logits_gather.vllm_plugin import capacity_from_config

    sched = SimpleNamespace(max_num_seqs=256)
    assert capacity_from_config(SimpleNamespace(scheduler_config=sched,
                                                speculative_config=None)) == 256
    spec = SimpleNamespace(num_speculative_tokens=3)
    assert capacity_from_config(SimpleNamespace(scheduler_config=sched,
                                                speculative_config=spec)) == 1024


def test_copy_rule() -> None:
    from logits_gather.vllm_processor import needs_copy

    assert needs_copy("processed_logits", torch.float32)
    assert not needs_copy("processed_logits", torch.bfloat16)
    for mode in (None, "raw_logprobs", "raw_logits", "processed_logprobs"):
        assert not needs_copy(mode, torch.float32)
