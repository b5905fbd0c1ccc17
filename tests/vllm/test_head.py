"""``fused_head``: the plugin applies vLLM's LM head with ``LogitsGather.linear``.

Two gloo ranks on vLLM 0.33.0's CPU platform, backend ``torch.distributed``, whose
``linear`` is ``F.linear`` + the gather, so every result must equal vLLM's own
``LogitsProcessor`` bit for bit. ``LogitsGather.linear`` is wrapped to record its
calls. With the setting on, an unquantized bf16 or fp16 ``ParallelLMHead`` is applied
by ``linear`` (steps above the capacity by vLLM); with fp32, a bias, another
quantization method, LoRA, a head that is not split over the TP group,
``VLLM_BATCH_INVARIANT``, ``skip_gather``, or the setting off, ``linear`` is never
called, and the reason is logged once per instance.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from scripts.support.dist import run_ranks
from tests.support.data import mismatch, same_bits
from tests.vllm import test_plugin as vp
from tests.vllm.test_plugin import ENV, HIDDEN, MAX_NUM_SEQS, TD, VOCAB

pytestmark = pytest.mark.vllm
SIZES = [1, MAX_NUM_SEQS, 2, MAX_NUM_SEQS + 1, 3]  # the 4th is above the capacity
NOT_SERVED = "LM head applied by vLLM, because "
SERVED = "LM head applied by LogitsGather.linear"


def _record_linear() -> list[tuple[int, int]]:
    """Wraps ``LogitsGather.linear`` in this rank; returns the shapes of its calls."""
    from logits_gather import gather

    calls: list[tuple[int, int]] = []
    real = gather.LogitsGather.linear

    def linear(self, hidden_states, weight, **kwargs):
        calls.append(tuple(hidden_states.shape))
        return real(self, hidden_states, weight, **kwargs)

    gather.LogitsGather.linear = linear
    return calls


def _same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.stride() == want.stride(), what
    assert same_bits(got, want), what + ": " + mismatch(got, want)


def _lines(messages: list[str], start: int, kind: str) -> list[str]:
    return [m.split(kind, 1)[1] if kind == NOT_SERVED else m for m in messages[start:] if kind in m]


def _served(rank: int, seed: int, calls: list, messages: list[str]) -> None:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    for dtype in (torch.bfloat16, torch.float16):
        lm_head = vp.head(seed, rank, dtype)
        for kwargs in ({}, {"org_vocab_size": VOCAB - 37, "scale": 0.5}):
            ours, start, first = LogitsProcessor(VOCAB, **kwargs), len(messages), len(calls)
            vp.check_steps(ours, vp.stock(VOCAB, **kwargs), lm_head, seed, SIZES, dtype, rank)
            assert calls[first:] == [(m, HIDDEN) for m in SIZES if m <= MAX_NUM_SEQS], calls
            assert ours.head_route.counts == {"linear": 4, "vllm": 1}
            assert ours.gather_counts == {"logits_gather": 4, "vllm": 1}
            assert len(_lines(messages, start, SERVED)) == 1, messages[start:]
            assert _lines(messages, start, NOT_SERVED) == [], messages[start:]


def _not_served(ours, ref, lm_head, h, calls, messages, reason, bias=None) -> None:
    """Two calls on vLLM's head: vLLM's bits, no ``linear``, ``reason`` logged once."""
    start, first = len(messages), len(calls)
    for step in range(2):
        _same(ours(lm_head, h, bias), ref(lm_head, h, bias), f"{reason}, step {step}")
    assert calls[first:] == [], (reason, calls)
    assert ours.head_route.counts["linear"] == 0
    assert _lines(messages, start, NOT_SERVED) == [reason], (reason, messages[start:])


def _refused(rank: int, seed: int, calls: list, messages: list[str]) -> None:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    class Rounded(UnquantizedEmbeddingMethod):
        """Stands for a quantized method: vLLM applies rounded weights."""

        def apply(self, layer, x, bias=None):
            return torch.nn.functional.linear(x, (layer.weight * 4).round() / 4, bias)

    bf16, h = torch.bfloat16, vp.hidden(seed + 1, 3, torch.bfloat16)
    fp32 = LogitsProcessor(VOCAB)
    _not_served(
        fp32,
        vp.stock(VOCAB),
        vp.head(seed, rank, torch.float32),
        vp.hidden(seed + 1, 3, torch.float32),
        calls,
        messages,
        "the LM head's weight is torch.float32; linear serves bfloat16 and float16",
    )
    assert fp32.gather_counts == {"logits_gather": 2, "vllm": 0}  # today's fast path
    biased = vp.head(seed, rank, bf16, bias=True)
    reason = "the LM head has a bias"
    _not_served(
        LogitsProcessor(VOCAB), vp.stock(VOCAB), biased, h, calls, messages, reason, biased.bias
    )
    rounded = vp.head(seed, rank, bf16, quant_method=Rounded())
    reason = "the LM head's quant_method is Rounded, not UnquantizedEmbeddingMethod"
    _not_served(LogitsProcessor(VOCAB), vp.stock(VOCAB), rounded, h, calls, messages, reason)
    whole = vp.head(seed, rank, bf16, disable_tp=True)
    reason = "the LM head is not split over the TP group (its tp_size is 1, the TP group's 2)"
    _not_served(LogitsProcessor(VOCAB), vp.stock(VOCAB), whole, h, calls, messages, reason)
    lm_head = vp.head(seed, rank, bf16)
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    reason = "VLLM_BATCH_INVARIANT is set (vLLM applies its batch-invariant GEMM)"
    _not_served(LogitsProcessor(VOCAB), vp.stock(VOCAB), lm_head, h, calls, messages, reason)
    del os.environ["VLLM_BATCH_INVARIANT"]
    ours, first = LogitsProcessor(VOCAB), len(calls)
    _same(
        ours._get_logits(h, lm_head, None, skip_gather=True),
        vp.stock(VOCAB)._get_logits(h, lm_head, None, skip_gather=True),
        "skip_gather",
    )
    assert calls[first:] == [] and ours.head_route.counts == {"linear": 0, "vllm": 0}


def _lora(rank: int, seed: int, calls: list, messages: list[str]) -> None:
    """The real ``LogitsProcessorWithLoRA`` on a bf16 head: its own ``_get_logits``
    applies the head and calls only the base layer's gather."""
    from vllm.config.lora import LoRAConfig
    from vllm.lora.layers.logits_processor import LogitsProcessorWithLoRA
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    class Punica:  # punica's add_lora_logits accumulates into the logits in place
        def add_lora_logits(self, y, x, a, b, scale):
            return y.add_(x.sum(-1, keepdim=True).to(y.dtype) * scale)

    bf16 = torch.bfloat16
    lm_head, base = vp.head(seed, rank, bf16), LogitsProcessor(VOCAB)
    layers = []
    for processor in (base, vp.stock(VOCAB)):
        layer = LogitsProcessorWithLoRA(
            processor, HIDDEN, bf16, torch.device("cpu"), lm_head.get_sharded_to_full_mapping()
        )
        layer.create_lora_weights(1, LoRAConfig(max_lora_rank=8, max_loras=1, lora_dtype=bf16))
        layer.set_mapping(Punica())
        layers.append(layer)
    start, first = len(messages), len(calls)
    for step, m in enumerate((2, MAX_NUM_SEQS)):
        h = vp.hidden(seed + 50 + step, m, bf16)
        got, want = (layer._get_logits(h, lm_head) for layer in layers)
        _same(got, want, f"LoRA step {step}")
    assert calls[first:] == [] and base.gather_counts == {"logits_gather": 2, "vllm": 0}
    assert _lines(messages, start, NOT_SERVED) == [
        "the LM head is applied by the caller's own _get_logits (vLLM's "
        "LogitsProcessorWithLoRA under LoRA), which only hands this processor the gather"
    ], messages[start:]


def _capture(rank: int, seed: int, calls: list, messages: list[str]) -> None:
    """A capture before any eager ``linear`` call for this hidden size takes vLLM's
    head (``linear`` compiles at its first call); after one, captures use it; under
    torch.compile tracing, vLLM's head and gather."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from logits_gather.vllm import processor

    bf16, lm_head, ref = torch.bfloat16, vp.head(seed, rank, torch.bfloat16), vp.stock(VOCAB)
    ours, h = LogitsProcessor(VOCAB), vp.hidden(seed + 70, 2, bf16)
    ours._gather_logits(torch.nn.functional.linear(h, lm_head.weight))  # built, eagerly
    ours._capturable = True  # as a symm_mem instance built with graphs=True
    real, mode = processor.call_mode, {"now": "capturing"}
    processor.call_mode = lambda tensor: mode["now"]
    start, first = len(messages), len(calls)
    _same(ours(lm_head, h), ref(lm_head, h), "capture before an eager linear")
    assert calls[first:] == [] and ours.gather_counts["logits_gather"] == 2
    assert _lines(messages, start, NOT_SERVED) == [
        f"a CUDA-graph capture came before any eager call with H={HIDDEN} "
        "(linear compiles at its first call)"
    ], messages[start:]
    for mode["now"] in ("eager", "capturing"):
        _same(ours(lm_head, h), ref(lm_head, h), f"{mode['now']} after an eager linear")
    assert calls[first:] == [(2, HIDDEN), (2, HIDDEN)], calls
    mode["now"] = "compiling"  # torch.compile tracing: vLLM's head and gather
    _same(ours(lm_head, h), ref(lm_head, h), "torch.compile tracing")
    assert len(calls) == first + 2 and ours.gather_counts["vllm"] == 1
    processor.call_mode = real


def _rank(rank: int, world_size: int, seed: int) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    messages, calls = vp.collect(), _record_linear()
    with vp.vllm_ranks(rank, world_size, dict(TD, fused_head=True)) as config:
        _served(rank, seed, calls, messages)
        _refused(rank, seed, calls, messages)
        _lora(rank, seed, calls, messages)
        _capture(rank, seed, calls, messages)
        off = VllmConfig(
            scheduler_config=config.scheduler_config, additional_config={"logits_gather": TD}
        )
        with set_current_vllm_config(off):
            ours = LogitsProcessor(VOCAB)
        bf16 = torch.bfloat16
        lm_head, h = vp.head(seed, rank, bf16), vp.hidden(seed + 2, 4, bf16)
        _not_served(
            ours, vp.stock(VOCAB), lm_head, h, calls, messages, "fused_head is off (the default)"
        )
        assert ours.gather_counts == {"logits_gather": 2, "vllm": 0}
    tagged = [m for m in messages if NOT_SERVED in m or SERVED in m]
    assert tagged and all(f"TP rank {rank}/{world_size}, global rank {rank}]" in m for m in tagged)


def test_fused_head_routing() -> None:
    run_ranks(_rank, 2, random.randrange(1 << 30), env=ENV, timeout=300)
