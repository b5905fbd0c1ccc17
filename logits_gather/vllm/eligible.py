"""Which V2 sampling steps the shard sampler may serve, and why the others may not.

Three levels, each a reason string or None (None: eligible), every one read from what
all TP ranks share (vLLM's config, the requests' ``SamplingParams``, the step's
scheduler output), so every rank decides alike without communicating:

- :func:`setup_reason`: the runner and its sampler, once;
- :func:`request_reason`: one request's ``SamplingParams``, when it is added;
- :func:`step_reason`: one step (grammar bitmask, draft tokens, its rows' reasons).

Only vLLM's public ``SamplingParams`` fields and the runner's configuration are read
here; :mod:`.sampler` adds a cross-check against vLLM's own per-request flags.
"""

from __future__ import annotations

from typing import Any

MAX_TOP_N = 20  # logits_gather.sampling's largest top_n
BUILTIN_PROCESSORS = frozenset({"LogitBiasState", "PenaltiesState", "BadWordsState"})
RAW = "raw_logprobs"


def setup_reason(runner: Any, sampler: Any) -> str | None:
    """Why this runner's steps can never take the route (None: they may)."""
    if type(sampler).__name__ != "Sampler":
        return f"vLLM's sampler is a {type(sampler).__name__} (watermarking or custom)"
    config = getattr(runner, "vllm_config", None)
    if getattr(runner, "batch_sharder", None) is not None:
        return "batch-sharded sampling is on"
    if getattr(runner, "pcp_manager", None) is not None:
        return "prefill context parallelism is on"
    if getattr(config, "lora_config", None) is not None:
        return "LoRA is on (its head adds to the logits)"
    if getattr(sampler, "use_fp64_gumbel", False):
        return "use_fp64_gumbel is on (the route draws fp32 noise)"
    if getattr(sampler, "compute_nans", False):
        return "VLLM_COMPUTE_NANS_IN_LOGITS is on"
    if getattr(sampler, "trace_replay_state", None) is not None:
        return "trace replay is on"
    if getattr(sampler, "return_sampling_mask", False):
        return "return_sampling_mask is on"
    names = {type(p).__name__ for p in getattr(sampler, "logits_processors", ())}
    if names - BUILTIN_PROCESSORS:
        return f"custom logits processors are configured ({sorted(names - BUILTIN_PROCESSORS)})"
    return None


def request_reason(params: Any, vocab: int, logprobs_mode: str, top_k_top_p: bool) -> str | None:
    """Why steps holding this request take vLLM's path (None: it may take the route)."""
    if params.logit_bias:
        return "logit bias"
    if params.allowed_token_ids:
        return "allowed token ids"
    if params.min_tokens:
        return "min_tokens"
    if (
        params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
        or params.repetition_penalty != 1.0
    ):
        return "penalties"
    if getattr(params, "bad_words", None) or getattr(params, "bad_words_token_ids", None):
        return "bad words"
    if getattr(params, "thinking_token_budget", None) is not None:
        return "thinking budget"
    if getattr(params, "structured_outputs", None) is not None:
        return "structured outputs"
    if getattr(params, "trace_decode_token_ids", None):
        return "trace replay"
    if getattr(params, "logprob_token_ids", None):
        return "logprob_token_ids"
    n = params.logprobs
    if n is not None and logprobs_mode != RAW:
        return f"logprobs in mode {logprobs_mode} (the route serves {RAW} only)"
    if n is not None and not 0 <= n <= MAX_TOP_N:
        return f"logprobs={n} (the route serves 0..{MAX_TOP_N})"
    filtered = 0 < params.top_k < vocab or params.top_p < 1.0
    if params.temperature != 0.0 and filtered and not top_k_top_p:
        return "top-k/top-p (the setting sampler_top_k is off)"
    return None


def step_reason(
    grammar_output: Any, num_draft_tokens: int, reasons: list[str | None]
) -> str | None:
    """Why this step takes vLLM's path; ``reasons`` are its rows' request reasons."""
    if grammar_output is not None:
        return "grammar bitmask"
    if num_draft_tokens:
        return "draft tokens (verification stays vLLM's)"
    return next((r for r in reasons if r is not None), None)


__all__ = ["MAX_TOP_N", "request_reason", "setup_reason", "step_reason"]
