"""The plugin's settings and sizing, without ranks. Runs without vLLM too (the
settings and memory modules import no vLLM); the last tests need it."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from logits_gather.vllm import memory
from logits_gather.vllm.settings import Settings, env_disabled

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs the real vllm package"
)
QWEN = 151_936  # Qwen3's vocabulary; a multiple of 64, so vLLM's padded width too


def test_defaults_and_sources() -> None:
    got = Settings.load(None, {})
    assert (
        got.disable,
        got.capacity,
        got.memory_mib,
        got.min_free_mib,
        got.backend,
        got.timeout_s,
        got.on_timeout,
        got.drafters,
        got.fused_head,
    ) == (False, None, 256.0, 2048.0, "auto", 300.0, "trap", True, False)
    assert got.describe() == "all defaults"


def test_additional_config_wins_over_environment() -> None:
    env = {
        "LOGITS_GATHER_VLLM_CAPACITY": "64",
        "LOGITS_GATHER_VLLM_BACKEND": "symm_mem",
        "LOGITS_GATHER_VLLM_ON_TIMEOUT": "raise",
        "LOGITS_GATHER_VLLM_FUSED_HEAD": "1",
    }
    got = Settings.load({"logits_gather": {"capacity": 8, "timeout_s": 60, "drafters": "off"}}, env)
    assert (got.capacity, got.backend, got.timeout_s, got.on_timeout, got.drafters) == (
        8,
        "symm_mem",
        60.0,
        "raise",
        False,
    )
    assert "capacity=8 (additional_config)" in got.describe()
    assert "backend=symm_mem (LOGITS_GATHER_VLLM_BACKEND)" in got.describe()
    assert got.fused_head and "fused_head=True (LOGITS_GATHER_VLLM_FUSED_HEAD)" in got.describe()
    off = Settings.load({"logits_gather": {"fused_head": False}}, env)
    assert not off.fused_head and "fused_head=False (additional_config)" in off.describe()
    other = Settings.load({"other_plugin": {"x": 1}}, {})  # other keys are not ours
    assert other == Settings()


@pytest.mark.parametrize(
    "config,env,match",
    [
        (None, {"LOGITS_GATHER_VLLM_DISABLE": "maybe"}, "LOGITS_GATHER_VLLM_DISABLE.*maybe"),
        (None, {"LOGITS_GATHER_VLLM_CAPACITY": "0"}, "LOGITS_GATHER_VLLM_CAPACITY.*'0'"),
        (None, {"LOGITS_GATHER_VLLM_CAPACITY": "many"}, "LOGITS_GATHER_VLLM_CAPACITY.*many"),
        (None, {"LOGITS_GATHER_VLLM_BACKEND": "nccl"}, "LOGITS_GATHER_VLLM_BACKEND.*nccl"),
        (None, {"LOGITS_GATHER_VLLM_TIMEOUT_S": "-1"}, "LOGITS_GATHER_VLLM_TIMEOUT_S.*-1"),
        (None, {"LOGITS_GATHER_VLLM_ON_TIMEOUT": "hang"}, "ON_TIMEOUT.*hang"),
        (None, {"LOGITS_GATHER_VLLM_FUSED_HEAD": "fast"}, "LOGITS_GATHER_VLLM_FUSED_HEAD.*fast"),
        ({"logits_gather": {"fused_head": 2}}, {}, r"\['fused_head'\].*2"),
        ({"logits_gather": {"capacity": 2.5}}, {}, r"\['capacity'\].*2.5"),
        ({"logits_gather": {"memory_mib": "lots"}}, {}, r"\['memory_mib'\].*lots"),
        ({"logits_gather": {"capcity": 8}}, {}, "unknown keys.*capcity"),
        ({"logits_gather": [1]}, {}, "must be a dict"),
    ],
)
def test_bad_values_name_the_setting(config, env, match) -> None:
    with pytest.raises(ValueError, match=match):
        Settings.load(config, env)


def test_env_disabled() -> None:
    assert env_disabled({"LOGITS_GATHER_VLLM_DISABLE": "yes"})
    assert not env_disabled({})


def _config(seqs: int, k: int | None = None, parallel: bool = False) -> SimpleNamespace:
    spec = (
        None if k is None else SimpleNamespace(num_speculative_tokens=k, parallel_drafting=parallel)
    )
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=seqs), speculative_config=spec
    )


def test_rows_for_target_and_drafters() -> None:
    assert memory.rows_from_config(_config(256), drafter=False) == 256
    assert memory.rows_from_config(_config(256, 3), drafter=False) == 1024
    assert memory.rows_from_config(_config(256, 3), drafter=True) == 256
    assert memory.rows_from_config(_config(256, 3, parallel=True), drafter=True) == 768


def test_budget_sets_the_capacity_and_the_readme_figures() -> None:
    # bf16: 3 x 151,936 x 2 = 911,616 bytes per row; 256 MiB hold 294 rows.
    assert memory.row_bytes(QWEN, 2, graphs=False) == 911_616
    assert memory.capacity_for(256, 256, QWEN, 2, False) == 256  # 222.6 MiB
    assert 256 * 911_616 / memory.MIB == pytest.approx(222.6, abs=0.05)
    for rows in (1024, 2048, 4096, 8192):
        assert memory.capacity_for(rows, 256, QWEN, 2, False) == 294
    assert 1024 * 911_616 == 933_494_784  # the uncapped 1024-row case: 0.93 GB
    assert memory.capacity_for(1024, 256, QWEN, 4, False) == 147  # fp32
    assert memory.capacity_for(1024, 256, QWEN, 2, True) == 176  # drafter, 5 slots
    assert memory.capacity_for(1024, 256, QWEN, 4, True) == 88
    assert memory.capacity_for(1024, 0, QWEN, 2, False) == 0  # nothing fits: fall back
    assert memory.capacity_for(1024, 256, QWEN, 2, False, explicit=2048) == 2048


def test_fit_problem_uses_free_memory(monkeypatch) -> None:
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(memory, "device_free_bytes", lambda device: 3000 * memory.MIB)
    assert memory.fit_problem(cuda, 900 * memory.MIB, 2048)[0] is None
    problem, seen = memory.fit_problem(cuda, 1000 * memory.MIB, 2048)
    assert "only 3000 MiB free, 1000.0 MiB needed and 2048 MiB must stay free" in problem
    assert seen == "3000 MiB free before"
    monkeypatch.undo()
    assert memory.fit_problem(torch.device("cpu"), 1 << 40, 2048) == (
        None,
        "free memory not checked on cpu",
    )


@needs_vllm
@pytest.mark.vllm
def test_drafter_role_and_full_graph_rule() -> None:
    from vllm.compilation.backends import set_model_tag
    from vllm.config.compilation import CUDAGraphMode

    from logits_gather.vllm import processor

    assert processor.current_role() == "target"
    for tag in ("eagle_head", "draft_model", "dflash_head", "dspark_head"):
        with set_model_tag(tag):
            assert processor.current_role() == "drafter"
    with set_model_tag("extract_hidden_states"):
        assert processor.current_role() == "target"

    def config(v2: bool, eager: bool, mode: CUDAGraphMode) -> SimpleNamespace:
        return SimpleNamespace(
            use_v2_model_runner=v2,
            model_config=SimpleNamespace(enforce_eager=eager),
            compilation_config=SimpleNamespace(cudagraph_mode=mode),
        )

    assert processor.speculator_captures_full(config(True, False, CUDAGraphMode.FULL_AND_PIECEWISE))
    assert not processor.speculator_captures_full(config(True, False, CUDAGraphMode.PIECEWISE))
    assert not processor.speculator_captures_full(config(True, True, CUDAGraphMode.FULL))
    assert not processor.speculator_captures_full(config(False, False, CUDAGraphMode.FULL))
    assert not processor.speculator_captures_full(SimpleNamespace())
    assert processor.needs_copy("processed_logits", torch.float32)
    assert not processor.needs_copy("processed_logits", torch.bfloat16)
    assert not processor.needs_copy("raw_logprobs", torch.float32)
    assert processor._joined([None, None]) is None
    assert processor._joined(["x", "x"]) == "x"
    assert processor._joined([None, "y"]) == "rank 1: y"
