"""What the plugin reads of the call and of vLLM's state: call mode, role, FULL-graph drafting.

Kept apart from :mod:`.processor`, which decides the path from these facts.
"""

from __future__ import annotations

import torch

DRAFTER_TAGS = ("eagle_head", "draft_model", "dflash_head", "dspark_head")


def needs_copy(logprobs_mode: str | None, dtype: torch.dtype) -> bool:
    """True where vLLM may read the logits after the next-but-one gather."""
    return logprobs_mode == "processed_logits" and dtype == torch.float32


def call_mode(logits: torch.Tensor) -> str:
    """``"compiling"``, ``"capturing"`` or ``"eager"``."""
    if torch.compiler.is_compiling():
        return "compiling"
    if logits.is_cuda and torch.cuda.is_current_stream_capturing():
        return "capturing"
    return "eager"


def current_role() -> str:
    """``"drafter"`` inside vLLM's speculative-model loaders (by model tag), else ``"target"``."""
    try:
        from vllm.compilation import backends
    except ImportError:
        return "target"
    return "drafter" if getattr(backends, "model_tag", "") in DRAFTER_TAGS else "target"


def speculator_captures_full(config: object) -> bool:
    """True where V2's speculator records compute_logits in FULL CUDA graphs."""
    try:
        return bool(
            config.use_v2_model_runner
            and not config.model_config.enforce_eager
            and config.compilation_config.cudagraph_mode.has_full_cudagraphs()
        )
    except Exception:  # noqa: BLE001 - a config without these: no FULL-graph drafter
        return False


__all__ = ["DRAFTER_TAGS", "call_mode", "current_role", "needs_copy", "speculator_captures_full"]
