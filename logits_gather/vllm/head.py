"""When the plugin applies vLLM's LM head itself, with ``LogitsGather.linear`` (``fused_head``).

vLLM 0.33.0's ``LogitsProcessor._get_logits(hidden, lm_head, embedding_bias)`` is
``_apply_head`` (``lm_head.quant_method.apply(lm_head, hidden, bias=embedding_bias)``,
after a cast where ``head_dtype`` differs), then, if ``lm_head.tp_size > 1``,
``_gather_logits``, then ``[..., :org_vocab_size]``. For an unquantized head
(``UnquantizedEmbeddingMethod``) without bias, ``apply`` is ``F.linear(hidden,
lm_head.weight)`` on CUDA (``dispatch_unquantized_gemm()``'s default; vLLM's CPU
platform may swap in oneDNN), except under ``VLLM_BATCH_INVARIANT``. ``lm_head.weight``
is this rank's shard of the padded vocabulary, ``[num_embeddings_per_partition, H]``:
vLLM pads the vocabulary so that every rank holds the same number of rows (padding rows
and LoRA-added rows included), which is the ``columns`` the gather takes, and its
all-gather concatenates the shards in rank order, as ``LogitsGather`` does. So
``LogitsGather.linear(hidden, lm_head.weight)[..., :org_vocab_size]`` is what
``_get_logits`` returns: bit for bit where ``linear`` takes ``F.linear`` + the gather
(the torch.distributed fallback, and shapes that ``head/table.py`` routes to cuBLAS),
within bf16 GEMM tolerance where it takes the fused kernel.

:func:`unserved` says why a call cannot be served that way. It reads only what every
TP rank shares (the layer's type, quantization method, dtype, bias, TP split and
shapes, vLLM's settings), so every rank decides alike. :class:`HeadRoute` holds one
``LogitsProcessor``'s choice and logs each reason once per instance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from vllm import envs
from vllm.distributed import get_tp_group
from vllm.model_executor.layers.vocab_parallel_embedding import (
    UnquantizedEmbeddingMethod,
    VocabParallelEmbedding,
)

log = logging.getLogger("logits_gather.vllm")
HEAD_DTYPES = (torch.bfloat16, torch.float16)
LORA = (
    "the LM head is applied by the caller's own _get_logits (vLLM's LogitsProcessorWithLoRA "
    "under LoRA), which only hands this processor the gather"
)


def unserved(
    lm_head: Any,
    hidden: torch.Tensor,
    embedding_bias: torch.Tensor | None,
    *,
    head_dtype: torch.dtype | None,
    tp: Any,
) -> str | None:
    """Why ``linear`` cannot stand in for vLLM's ``_apply_head`` + gather here (None: it can).
    ``tp`` is vLLM's TP group coordinator."""
    if not isinstance(lm_head, VocabParallelEmbedding):
        return f"the LM head is a {type(lm_head).__name__}, not vLLM's VocabParallelEmbedding"
    method = type(lm_head.quant_method)
    if method is not UnquantizedEmbeddingMethod:
        return f"the LM head's quant_method is {method.__name__}, not UnquantizedEmbeddingMethod"
    if embedding_bias is not None or getattr(lm_head, "bias", None) is not None:
        return "the LM head has a bias"
    if envs.VLLM_BATCH_INVARIANT:
        return "VLLM_BATCH_INVARIANT is set (vLLM applies its batch-invariant GEMM)"
    group = getattr(lm_head, "parallel_group", None)
    if lm_head.tp_size != tp.world_size or (group is not None and group is not tp):
        return (
            f"the LM head is not split over the TP group (its tp_size is {lm_head.tp_size}, "
            f"the TP group's {tp.world_size})"
        )
    weight = lm_head.weight
    if weight.dtype not in HEAD_DTYPES:
        return f"the LM head's weight is {weight.dtype}; linear serves bfloat16 and float16"
    if head_dtype is not None and head_dtype != hidden.dtype:
        return f"head_dtype={head_dtype} differs from the hidden states' {hidden.dtype}"
    if hidden.dtype != weight.dtype:
        return f"the hidden states are {hidden.dtype} and the LM head's weight {weight.dtype}"
    if hidden.dim() != 2:
        return f"the hidden states are {hidden.dim()}-D, not [M, H]"
    rows = lm_head.num_embeddings_per_partition
    if weight.dim() != 2 or tuple(weight.shape) != (rows, hidden.shape[1]):
        return (
            f"the LM head's weight {tuple(weight.shape)} is not this rank's padded vocabulary "
            f"shard [{rows}, {hidden.shape[1]}]"
        )
    if weight.device != hidden.device:
        return f"the LM head's weight is on {weight.device}, the hidden states on {hidden.device}"
    return None


class HeadRoute:
    """Who applies one ``LogitsProcessor``'s LM head. ``counts``: ``_get_logits`` calls by
    who applied it (``"linear"``, ``"vllm"``); ``tag(tp)`` names the instance in logs."""

    def __init__(self, enabled: bool, tag: Callable[[Any], str]) -> None:
        self.enabled = enabled
        self.counts = {"linear": 0, "vllm": 0}
        self._tag = tag
        self._logged: set[str] = set()
        self._eager_sizes: set[int] = set()  # hidden sizes linear has run (and compiled) for

    def pick(
        self,
        hidden: torch.Tensor,
        lm_head: Any,
        bias: torch.Tensor | None,
        head_dtype: torch.dtype | None,
        mode: str,
        gather: Callable[..., Any],
    ) -> Any:
        """The LogitsGather to apply the head with, or None for vLLM's head. ``gather(m,
        columns, dtype, like)`` is the processor's fast-path choice (None: vLLM's path)."""
        why = "fused_head is off (the default)"
        if self.enabled:
            why = unserved(lm_head, hidden, bias, head_dtype=head_dtype, tp=get_tp_group())
        lg = None
        if why is None:
            lg = gather(hidden.shape[0], lm_head.weight.shape[0], hidden.dtype, hidden)
            if lg is not None and mode == "capturing" and hidden.shape[1] not in self._eager_sizes:
                why = (
                    f"a CUDA-graph capture came before any eager call with H={hidden.shape[1]} "
                    "(linear compiles at its first call)"
                )
                lg = None
        if why is not None:
            self.not_served(why)
        elif lg is not None:
            self.not_served(None)
        if lg is None:
            self.counts["vllm"] += 1
        return lg

    def apply(self, lg: Any, hidden: torch.Tensor, weight: torch.Tensor, mode: str) -> Any:
        out = lg.linear(hidden, weight)
        self.counts["linear"] += 1
        if mode == "eager":
            self._eager_sizes.add(hidden.shape[1])
        return out

    def foreign(self) -> None:
        """The gather was called by another ``_get_logits`` (LoRA's)."""
        if self.enabled:
            self.not_served(LORA)

    def not_served(self, why: str | None) -> None:
        """Logs ``why`` the head is vLLM's (None: that ``linear`` serves it), once each."""
        key = why or ""
        if key in self._logged:
            return
        self._logged.add(key)
        tag = self._tag(get_tp_group())
        if why is None:
            log.info(
                "%s: LM head applied by LogitsGather.linear (fused_head: the fused kernel "
                "where logits_gather/head/table.py picks it, else F.linear + the gather)",
                tag,
            )
        else:
            log.info("%s: LM head applied by vLLM, because %s", tag, why)


__all__ = ["HEAD_DTYPES", "LORA", "HeadRoute", "unserved"]
