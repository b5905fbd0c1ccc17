"""The vLLM plugin against the real vLLM 0.33, on its CPU platform, with gloo ranks:
registration, settings reaching the processor, the collective build decisions.

Each rank builds vLLM's world and TP groups with ``init_distributed_environment``
and ``initialize_model_parallel``, loads general plugins with
``load_general_plugins()`` (so ``logits_gather`` must be installed with its entry
point: ``pip install -e .[vllm]``), and builds ``LogitsProcessor`` and
``ParallelLMHead`` through their normal constructors. Results are compared bit
for bit with vLLM's own class on the same inputs. ``VLLM_TARGET_DEVICE=cpu``
selects vLLM's CPU platform even with a CUDA build of vLLM and torch. The call
sequences of vLLM's model runners are in ``vllm/test_paths.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random

import pytest
import torch

from scripts.support.dist import run_ranks
from tests.support.data import mismatch, same_bits

pytestmark = pytest.mark.vllm
if os.environ.get("LOGITS_GATHER_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401 - CI's vLLM venv: a broken install must fail, not skip
else:
    pytest.importorskip("vllm", reason="needs the real vllm package (pip install -e .[vllm])")

VOCAB, HIDDEN, MAX_NUM_SEQS = 1000, 64, 6  # vLLM pads VOCAB to 1024
PADDED = 1024
# CUDA_VISIBLE_DEVICES="": vLLM 0.34's CPU platform refuses x86 without Triton, and its
# triton_utils keeps Triton only where no GPU driver is expected (an empty device list).
ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_PLUGINS": "logits_gather", "CUDA_VISIBLE_DEVICES": ""}
TD = {"backend": "torch.distributed"}


@contextlib.contextmanager
def vllm_ranks(rank: int, world_size: int, additional_config: dict | None = None):
    """vLLM's config context, its own distributed init (on the group run_ranks
    made) and plugin loading, as a worker does them."""
    from vllm.config import SchedulerConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.plugins import load_general_plugins

    config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=MAX_NUM_SEQS,
            max_num_batched_tokens=2048,
            max_model_len=2048,
            is_encoder_decoder=False,
        ),
        additional_config={"logits_gather": additional_config} if additional_config else {},
    )
    load_general_plugins()  # WorkerWrapperBase.init_worker: before the config is current
    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=world_size,
            rank=rank,
            local_rank=rank,
            distributed_init_method="env://",
            backend="gloo",
        )
        initialize_model_parallel(tensor_model_parallel_size=world_size)
        yield config


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def collect(logger_name: str = "vllm") -> list[str]:
    """The INFO messages that reach ``logger_name`` from now on in this rank (the
    plugin routes its records to vLLM's logger)."""
    handler = _Collect()
    logging.getLogger(logger_name).addHandler(handler)
    logging.getLogger(logger_name).setLevel(logging.INFO)
    return handler.messages


def stock(*args, **kwargs):
    """vLLM's own LogitsProcessor, built while the out-of-tree entry is lifted."""
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    saved = op_registry_oot.pop("LogitsProcessor", None)
    try:
        return LogitsProcessor(*args, **kwargs)
    finally:
        if saved is not None:
            op_registry_oot["LogitsProcessor"] = saved


def head(seed: int, rank: int, dtype: torch.dtype, **kwargs):
    """vLLM's ``ParallelLMHead`` (``kwargs`` go to it) with random weights (and bias)."""
    from vllm.model_executor.layers import utils as vllm_utils
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    if not hasattr(torch.ops._C, "convert_weight_packed"):
        # vLLM's CUDA wheel (what CI installs) has no CPU kernels, yet on a CPU with AMX
        # its CPU GEMM dispatch picks them for bf16/fp16 weights and raises. Take the
        # path it takes on CPUs without AMX: torch's linear.
        vllm_utils.check_cpu_sgl_kernel = lambda *args: False
    lm_head = ParallelLMHead(VOCAB, HIDDEN, params_dtype=dtype, **kwargs)
    gen = torch.Generator().manual_seed(seed + 1000 + rank)
    lm_head.weight.data.copy_(torch.randn(lm_head.weight.shape, generator=gen).to(dtype))
    if lm_head.bias is not None:
        lm_head.bias.data.copy_(torch.randn(lm_head.bias.shape, generator=gen).to(dtype))
    lm_head.quant_method.process_weights_after_loading(lm_head)
    return lm_head


def hidden(seed: int, m: int, dtype: torch.dtype) -> torch.Tensor:
    """The same on every TP rank, as in vLLM; fresh per ``seed``."""
    return torch.randn(m, HIDDEN, generator=torch.Generator().manual_seed(seed)).to(dtype)


def check_steps(ours, ref, lm_head, seed: int, sizes, dtype, rank: int) -> None:
    """``forward`` of both processors on the same hidden states, bit for bit, and
    each result still intact after the next call."""
    previous = None
    for step, m in enumerate(sizes):
        h = hidden(seed + 17 * step, m, dtype)
        got, want = ours(lm_head, h), ref(lm_head, h)
        assert got.shape == want.shape and got.stride() == want.stride()
        assert same_bits(got, want), f"rank {rank} {dtype} step {step} m {m}: " + mismatch(
            got, want
        )
        if previous is not None:
            assert same_bits(*previous), f"rank {rank} step {step}: earlier result changed"
        previous = (got, want.clone())


def _bits_rank(rank: int, world_size: int, seed: int, cap: int) -> dict:
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from logits_gather.vllm.processor import GatherLogitsProcessor

    messages = collect()
    counts = {}
    with vllm_ranks(rank, world_size):  # settings from LOGITS_GATHER_VLLM_* only
        assert op_registry_oot.get("LogitsProcessor") is GatherLogitsProcessor, (
            "vLLM did not load the logits_gather plugin: is its vllm.general_plugins entry "
            "point installed (pip install -e .[vllm])?"
        )
        for dtype in (torch.bfloat16, torch.float32):
            lm_head = head(seed, rank, dtype)
            assert lm_head.weight.shape[0] == PADDED // world_size
            for kwargs in ({}, {"org_vocab_size": VOCAB - 37, "scale": 0.5}):
                ours = LogitsProcessor(VOCAB, **kwargs)
                assert type(ours) is GatherLogitsProcessor and ours.role == "target"
                check_steps(
                    ours,
                    stock(VOCAB, **kwargs),
                    lm_head,
                    seed,
                    [1, cap, 2, cap + 1, 3, cap, 1, 4],
                    dtype,
                    rank,
                )
                assert ours.gather_capacity == cap and not ours._copy
                counts[f"{dtype}-{len(kwargs)}"] = dict(ours.gather_counts)
    chosen = [m for m in messages if "fast path (backend=torch.distributed" in m]
    assert len(chosen) == 4, messages
    assert all(f"TP rank {rank}/{world_size}, global rank {rank}]" in m for m in chosen), chosen
    assert all(f"capacity={cap} (LOGITS_GATHER_VLLM_CAPACITY)" in m for m in chosen), chosen
    return counts


def test_plugin_matches_vllm_bit_for_bit() -> None:
    """4 ranks, bf16 and fp32, the padded vocab, ``org_vocab_size`` and scaling,
    with the settings in environment variables."""
    env = dict(ENV, LOGITS_GATHER_VLLM_BACKEND="torch.distributed", LOGITS_GATHER_VLLM_CAPACITY="5")
    results = run_ranks(_bits_rank, 4, random.randrange(1 << 30), 5, env=env, timeout=300)
    for counts in results:  # 7 of 8 steps fit
        assert all(c == {"logits_gather": 7, "vllm": 1} for c in counts.values()), counts


def _decisions_rank(rank: int, world_size: int, seed: int) -> list[str]:
    """Settings from additional_config (none: backend auto, which refuses CPU),
    then one rank too short of memory, then one rank failing after construction:
    every rank falls back, with the same reason, and the results stay right."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from logits_gather.vllm import memory, processor
    from logits_gather.vllm.settings import Settings

    messages = collect()
    with vllm_ranks(rank, world_size) as config:
        lm_head = head(seed, rank, torch.float32)
        ours = LogitsProcessor(VOCAB)
        check_steps(ours, stock(VOCAB), lm_head, seed, [4, 2], torch.float32, rank)
        assert ours._lg is None and ours.gather_counts == {"logits_gather": 0, "vllm": 2}
        off = VllmConfig(
            scheduler_config=config.scheduler_config,
            additional_config={"logits_gather": {"disable": "1"}},
        )
        with set_current_vllm_config(off):
            disabled = LogitsProcessor(VOCAB)
        check_steps(disabled, stock(VOCAB), lm_head, seed, [2], torch.float32, rank)
        assert disabled._state == "stock" and disabled.gather_counts["vllm"] == 1

        memory.device_free_bytes = lambda device: (100 if rank == 1 else 100_000) * memory.MIB
        ours = LogitsProcessor(VOCAB)
        ours._settings = Settings(backend="torch.distributed")
        check_steps(ours, stock(VOCAB), lm_head, seed, [3, 1], torch.float32, rank)
        assert ours._state == "stock" and ours.gather_counts == {"logits_gather": 0, "vllm": 2}

        def unreadable(device):
            if rank == 0:
                raise RuntimeError("simulated driver error")
            return 100_000 * memory.MIB

        memory.device_free_bytes = unreadable
        ours = LogitsProcessor(VOCAB)
        ours._settings = Settings(backend="torch.distributed")
        check_steps(ours, stock(VOCAB), lm_head, seed, [1], torch.float32, rank)
        assert ours._state == "stock"
        memory.device_free_bytes = lambda device: None

        real = processor.LogitsGather

        def broken(**kwargs):
            built = real(**kwargs)  # every rank completes the collective construction
            if rank == world_size - 1:
                raise RuntimeError("simulated failure after construction")
            return built

        processor.LogitsGather = broken
        ours = LogitsProcessor(VOCAB)
        ours._settings = Settings(backend="torch.distributed")
        check_steps(ours, stock(VOCAB), lm_head, seed, [2, 2], torch.float32, rank)
        assert ours._state == "stock" and ours._lg is None
        processor.LogitsGather = real

        processor._accepts = lambda name: False  # a library without on_timeout
        ours = LogitsProcessor(VOCAB)
        ours._settings = Settings(backend="torch.distributed")
        check_steps(ours, stock(VOCAB), lm_head, seed, [2], torch.float32, rank)
        assert ours._state == "ready"
        assert any("has no on_timeout option" in m for m in messages), messages
        line = [m for m in messages if "fast path" in m][-1]  # the library's own default
        assert f"on_timeout={ours._lg.on_timeout}" in line, line
    assert any("registered GatherLogitsProcessor in pid" in m for m in messages), messages
    return [m for m in messages if "vLLM's all-gather, because" in m]


def test_every_rank_agrees_to_fall_back() -> None:
    results = run_ranks(_decisions_rank, 2, random.randrange(1 << 30), env=ENV, timeout=300)
    for rank, lines in enumerate(results):
        assert len(lines) == 5, lines
        assert "because settings ask for it (disable=True (additional_config))" in lines[1]
        del lines[1]
        assert all(f"TP rank {rank}/2" in line for line in lines), lines
        assert "because logits are on cpu and the fast path needs CUDA" in lines[0]
        assert "because rank 1: only 100 MiB free" in lines[1]
        assert "min_free_mib" in lines[1]
        assert "because rank 0: free memory unreadable (RuntimeError: simulated" in lines[2]
        assert "rank 1: LogitsGather could not be built (RuntimeError: simulated" in lines[3]
        assert "rank 0:" not in lines[3]


def test_register_in_process(monkeypatch) -> None:
    """``register`` itself: the variable turns it off, bad values stop start-up,
    and a second call changes nothing (vLLM may load plugins more than once)."""
    from vllm.model_executor.custom_op import op_registry_oot

    from logits_gather.vllm import register
    from logits_gather.vllm.processor import GatherLogitsProcessor

    saved = op_registry_oot.pop("LogitsProcessor", None)
    try:
        monkeypatch.setenv("LOGITS_GATHER_VLLM_DISABLE", "1")
        register()
        assert "LogitsProcessor" not in op_registry_oot
        monkeypatch.setenv("LOGITS_GATHER_VLLM_DISABLE", "0")
        monkeypatch.setenv("LOGITS_GATHER_VLLM_MEMORY_MIB", "a lot")
        with pytest.raises(ValueError, match="LOGITS_GATHER_VLLM_MEMORY_MIB.*a lot"):
            register()
        monkeypatch.delenv("LOGITS_GATHER_VLLM_MEMORY_MIB")
        register()
        register()
        assert op_registry_oot["LogitsProcessor"] is GatherLogitsProcessor
    finally:
        op_registry_oot.pop("LogitsProcessor", None)
        if saved is not None:
            op_registry_oot["LogitsProcessor"] = saved
