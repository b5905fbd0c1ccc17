"""The plugin driven the way vLLM 0.33.0's model runners call ``compute_logits``.

Models call ``self.logits_processor(self.lm_head, hidden_states)`` from
``compute_logits``; the sequences below follow the runners' code (paths are in
the vllm package), on 2 gloo ranks, bit for bit against vLLM's own class:

* profiling: ``profile_run`` -> ``_dummy_sampler_run`` computes logits for
  ``min(max_num_seqs, max_num_batched_tokens)`` rows (V2
  ``v1/worker/gpu/model_runner.py``, V1 ``v1/worker/gpu_model_runner.py``, with
  ``rand_like`` hidden states): the build must happen there.
* V2 ``sample_tokens`` -> ``sample``: ``hidden_states[logits_indices]``, then
  the grammar bitmask in place, then the sampler; then prompt logprobs through
  the real ``compute_prompt_logprobs_with_chunking`` (1024-row chunks).
* V1 ``execute_model`` parks the logits, ``sample_tokens`` masks and samples
  them, then ``_get_prompt_logprobs_dict`` gathers each request's prompt rows.
* LoRA: the real ``LogitsProcessorWithLoRA._get_logits``, which calls
  ``base_layer._gather_logits`` (punica's in-place delta is replaced by a
  deterministic in-place add, since punica needs vLLM's compiled ops).
* A real model class: vLLM's ``LlamaForCausalLM`` (tiny config, built by
  ``initialize_model``) creates the plugin's processor in model code, and its
  ``compute_logits`` matches a stock-built copy.
* Drafters: built under the speculative loaders' model tag; V2's FULL-graph
  speculator gets a graph-capable instance sized by the drafter's rows; the
  capture-time routing (vLLM's path until built, for non-capturable instances
  and under torch.compile).
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from scripts.support.dist import run_ranks
from tests.support.data import mismatch, same_bits
from tests.vllm.test_plugin import (
    ENV,
    HIDDEN,
    MAX_NUM_SEQS,
    PADDED,
    TD,
    VOCAB,
    collect,
    head,
    hidden,
    stock,
    vllm_ranks,
)

pytestmark = pytest.mark.vllm
BUDGET_MIB = 0.09375  # 98,304 B: fp32 rows cost 12,288 B (3 slots), 20,480 B (5 slots)


def _same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if not got.is_floating_point():
        assert torch.equal(got, want), what
        return
    assert got.shape == want.shape and same_bits(got, want), what + ": " + mismatch(got, want)


def _topk_scores(logits, num_logprobs, token_ids, logits_mode=False):
    """``compute_topk_scores`` of ``v1/worker/gpu/sample/logprob.py`` in plain torch
    (its rank kernel is Triton): reads the chunk's logits before the next chunk."""
    from types import SimpleNamespace

    ids = torch.cat((token_ids.unsqueeze(-1), logits.topk(num_logprobs, -1).indices), 1)
    picked = logits.gather(-1, token_ids.unsqueeze(-1))
    return SimpleNamespace(
        logprob_token_ids=ids,
        logprobs=logits.gather(-1, ids).float(),
        selected_token_ranks=(logits > picked).sum(-1),
    )


def _v2_and_v1(rank: int, ours, ref, lm_head, seed: int) -> None:
    from vllm.v1.worker.gpu.sample import prompt_logprob

    prompt_logprob.compute_topk_scores = _topk_scores  # vLLM's needs a Triton kernel

    # profile_run -> _dummy_sampler_run: the first call, which builds.
    profile_rows = min(MAX_NUM_SEQS, 2048)
    h = torch.rand_like(hidden(seed, profile_rows, torch.float32))
    with torch.inference_mode():  # as the runners run (the slots must stay normal tensors)
        _same(ours(lm_head, h), ref(lm_head, h), f"rank {rank} profile")
    assert ours._state == "ready" and ours.gather_capacity == MAX_NUM_SEQS
    for step, (tokens, reqs) in enumerate([(9, 3), (MAX_NUM_SEQS, MAX_NUM_SEQS), (40, 2)]):
        # V2 sample(): logits for the last token of each request, bitmask in place.
        states = hidden(seed + 100 + step, tokens, torch.float32)
        logits_indices = (
            torch.randperm(tokens, generator=torch.Generator().manual_seed(seed + step))[:reqs]
            .sort()
            .values
        )
        mask = torch.rand(reqs, VOCAB, generator=torch.Generator().manual_seed(step)) < 0.3
        with torch.inference_mode():
            got = ours(lm_head, states[logits_indices])
            want = ref(lm_head, states[logits_indices])
            got.masked_fill_(mask, float("-inf"))
            want.masked_fill_(mask, float("-inf"))
            _same(
                got.to(torch.float32).softmax(-1),
                want.to(torch.float32).softmax(-1),
                f"rank {rank} V2 sample step {step}",
            )
    # V2 prompt logprobs: 1024-row chunks (the first above capacity, the second not).
    prompt = hidden(seed + 7, 1024 + 5, torch.float32)
    ids = torch.randint(0, VOCAB, (1024 + 5,), generator=torch.Generator().manual_seed(seed))
    before = dict(ours.gather_counts)
    results = [
        prompt_logprob.compute_prompt_logprobs_with_chunking(
            ids, prompt, lambda x, p=p: p(lm_head, x), 3, logprobs_mode="raw_logits"
        )
        for p in (ours, ref)
    ]
    for got, want in zip(*results, strict=True):
        _same(got, want, f"rank {rank} prompt logprobs")
    assert ours.gather_counts["logits_gather"] - before["logits_gather"] == 1
    assert ours.gather_counts["vllm"] - before["vllm"] == 1
    # V1 execute_model then sample_tokens, then prompt logprobs per request (outside
    # inference mode here: in place on the slots must work there too).
    parked = ours(lm_head, hidden(seed + 8, 4, torch.float32))
    parked_ref = ref(lm_head, hidden(seed + 8, 4, torch.float32))
    parked[:, ::7] = float("-inf")
    parked_ref[:, ::7] = float("-inf")
    _same(parked.argmax(-1), parked_ref.argmax(-1), f"rank {rank} V1 sample")
    for n in (MAX_NUM_SEQS + 1, 3):
        _same(ours(lm_head, prompt[:n]), ref(lm_head, prompt[:n]), f"rank {rank} V1 prompt")


def _lora(rank: int, ours, ref, lm_head, seed: int) -> None:
    from vllm.config.lora import LoRAConfig
    from vllm.lora.layers.logits_processor import LogitsProcessorWithLoRA

    class Punica:  # punica's add_lora_logits accumulates into the logits in place
        def add_lora_logits(self, y, x, a, b, scale):
            return y.add_(x.sum(-1, keepdim=True).to(y.dtype) * scale)

    layers = []
    for base in (ours, ref):
        layer = LogitsProcessorWithLoRA(
            base, HIDDEN, torch.float32, torch.device("cpu"), lm_head.get_sharded_to_full_mapping()
        )
        config = LoRAConfig(max_lora_rank=8, max_loras=1, lora_dtype=torch.float32)
        layer.create_lora_weights(1, config)
        layer.set_mapping(Punica())
        layers.append(layer)
    for step, m in enumerate((2, MAX_NUM_SEQS, MAX_NUM_SEQS + 3)):
        h = hidden(seed + 50 + step, m, torch.float32)
        got, want = (layer._get_logits(h, lm_head) for layer in layers)
        _same(got, want, f"rank {rank} LoRA step {step}")


def _drafters(rank: int, world_size: int, seed: int, counts: dict) -> None:
    from vllm.compilation.backends import set_model_tag
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from logits_gather.vllm import processor

    lm_head = head(seed, rank, torch.float32)
    processor.speculator_captures_full = lambda config: True  # V2, FULL cudagraphs
    with set_model_tag("eagle_head"):
        draft = LogitsProcessor(VOCAB)
    assert draft.role == "drafter" and draft.graphs and draft.rows == MAX_NUM_SEQS
    modes = {"now": "capturing"}
    processor.call_mode = lambda logits: modes["now"]
    h = hidden(seed + 60, 2, torch.float32)
    ref = stock(VOCAB)
    _same(draft(lm_head, h), ref(lm_head, h), "capture before the build")
    assert draft._state == "pending" and draft.gather_counts["vllm"] == 1
    modes["now"] = "eager"  # the speculator's eager dummy propose in profile_run
    _same(draft(lm_head, h), ref(lm_head, h), "drafter profile")
    assert draft._state == "ready" and draft.gather_capacity == 4  # 98,304 B // 20,480 B
    modes["now"] = "capturing"  # torch.distributed is not capturable: vLLM's path
    _same(draft(lm_head, h), ref(lm_head, h), "capture, torch.distributed")
    draft._capturable = True  # as a symm_mem instance built with graphs=True
    _same(draft(lm_head, h), ref(lm_head, h), "capture, capturable")
    modes["now"] = "compiling"
    _same(draft(lm_head, h), ref(lm_head, h), "torch.compile tracing")
    modes["now"] = "eager"
    _same(
        draft(lm_head, hidden(seed, 5, torch.float32)),
        ref(lm_head, hidden(seed, 5, torch.float32)),
        "above the drafter's capacity",
    )
    counts["drafter"] = dict(draft.gather_counts)
    processor.speculator_captures_full = lambda config: False  # V1 or no FULL graphs
    with set_model_tag("draft_model"):
        v1_draft = LogitsProcessor(VOCAB)
    assert v1_draft.role == "drafter" and not v1_draft.graphs


TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}


def _real_model(rank: int, seed: int, model_dir: str, counts: dict) -> None:
    """vLLM's own Llama class builds its ``LogitsProcessor`` in model code; its
    ``compute_logits`` matches a stock-built copy. Built again under the EAGLE
    loader's model tag, the same class's processor is a drafter."""
    from vllm.compilation.backends import set_model_tag
    from vllm.config import ModelConfig, SchedulerConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.model_loader.utils import (
        initialize_model,
        process_weights_after_loading,
    )

    from logits_gather.vllm.processor import GatherLogitsProcessor

    model_config = ModelConfig(
        model=model_dir, skip_tokenizer_init=True, dtype="float32", max_model_len=256
    )
    config = VllmConfig(
        model_config=model_config,
        additional_config={"logits_gather": TD},
        scheduler_config=SchedulerConfig(
            max_num_seqs=MAX_NUM_SEQS,
            max_num_batched_tokens=256,
            max_model_len=256,
            is_encoder_decoder=False,
        ),
    )
    models = []
    for plugin in (True, False):
        saved = None if plugin else op_registry_oot.pop("LogitsProcessor")
        with set_current_vllm_config(config):
            model = initialize_model(vllm_config=config, prefix=f"plugin_{plugin}")
        if saved is not None:
            op_registry_oot["LogitsProcessor"] = saved
        process_weights_after_loading(model, model_config, torch.device("cpu"))
        model.lm_head.weight.data.copy_(head(seed, rank, torch.float32).weight.data)
        models.append(model)
    ours, ref = models
    assert type(ours.logits_processor) is GatherLogitsProcessor
    assert type(ref.logits_processor).__name__ == "LogitsProcessor"
    assert ours.logits_processor.role == "target"
    for step, m in enumerate((MAX_NUM_SEQS, 2, MAX_NUM_SEQS + 1, 1)):
        h = hidden(seed + 300 + step, m, torch.float32)
        _same(ours.compute_logits(h), ref.compute_logits(h), f"rank {rank} Llama step {step}")
    counts["llama"] = dict(ours.logits_processor.gather_counts)
    with set_current_vllm_config(config), set_model_tag("eagle_head"):
        draft = initialize_model(vllm_config=config, prefix="draft")
    assert draft.logits_processor.role == "drafter"


def _paths_rank(rank: int, world_size: int, seed: int, model_dir: str) -> dict:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    messages = collect()
    counts: dict = {}
    with vllm_ranks(rank, world_size, dict(TD, memory_mib=BUDGET_MIB)):
        lm_head = head(seed, rank, torch.float32)
        assert lm_head.weight.shape[0] == PADDED // world_size
        ours, ref = LogitsProcessor(VOCAB), stock(VOCAB)
        _v2_and_v1(rank, ours, ref, lm_head, seed)
        counts["target"] = dict(ours.gather_counts)
        lora_base, lora_ref = LogitsProcessor(VOCAB), stock(VOCAB)
        _lora(rank, lora_base, lora_ref, lm_head, seed)
        counts["lora"] = dict(lora_base.gather_counts)
        _drafters(rank, world_size, seed, counts)
        _real_model(rank, seed, model_dir, counts)
    built = [m for m in messages if "fast path" in m]
    assert len(built) == 4, messages
    assert "6 rows x 1024 padded vocab, 3 slots = 0.1 MiB" in built[0], built[0]
    assert "4 rows x 1024 padded vocab, 5 slots = 0.1 MiB" in built[2], built[2]
    assert all("timeout 300s, on_timeout=trap" in m for m in built), built
    assert all(f"TP rank {rank}/{world_size}" in m for m in built)
    assert "memory_mib=0.09375 (additional_config)" in built[0]
    return counts


def test_runner_call_paths(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    results = run_ranks(
        _paths_rank, 2, random.randrange(1 << 30), str(tmp_path), env=ENV, timeout=300
    )
    for counts in results:
        # profile + 3 V2 steps + 1 prompt chunk + V1 step + 1 V1 prompt row set;
        # vLLM: one 1024-row chunk and one 7-row V1 prompt.
        assert counts["target"] == {"logits_gather": 7, "vllm": 2}, counts
        assert counts["lora"] == {"logits_gather": 2, "vllm": 1}, counts
        # vLLM: capture before the build, capture on torch.distributed, compiling, 5 > 4 rows
        assert counts["drafter"] == {"logits_gather": 2, "vllm": 4}, counts
        assert counts["llama"] == {"logits_gather": 3, "vllm": 1}, counts
