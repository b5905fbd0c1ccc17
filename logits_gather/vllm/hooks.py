"""Where :class:`.sampler.ShardSampler` enters vLLM's V2 GPU model runner: two wrappers.

1. ``ModelState.custom_sampler`` (``v1/worker/gpu/model_states/interface.py``), the
   runner's seam for "wrap or replace the default sampler", called once in
   ``load_model`` right after vLLM's ``Sampler`` is built. The wrapper keeps any model
   state's own answer; otherwise it returns ``(ShardSampler(sampler), None)`` when the
   setting ``sampler`` is on, vLLM's sampler is the plain ``Sampler`` and there is no
   speculative decoding (whose rejection sampler vLLM builds only when no custom
   sampler is returned).
2. ``GPUModelRunner.sample(hidden_states, input_batch, grammar_output)``: the one place
   where the hidden states, the batch and the grammar bitmask meet before vLLM's
   ``compute_sample_logits`` gathers the logits. The wrapper asks
   ``ShardSampler.step`` first and calls vLLM's ``sample`` for every step it declines.

vLLM calls ``sample()`` eagerly after the forward (a CUDA-graph replay or not), so
every cudagraph mode keeps working. Both seams exist in vLLM 0.33.0 and 0.34.0; they
are found by attribute, and :func:`install` leaves vLLM alone (and says why) where
either is missing.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..logs import log_once
from .settings import Settings

log = logging.getLogger("logits_gather.vllm")
_MARK = "_logits_gather_route"


def _wrap_custom_sampler(original: Any) -> Any:
    @functools.wraps(original)
    def custom_sampler(self: Any, sampler: Any) -> Any:
        custom = original(self, sampler)
        if custom is not None:
            log_once(log, "logits_gather: the model state supplies its own sampler; route off")
            return custom
        config = self.vllm_config
        settings = Settings.load(getattr(config, "additional_config", None))
        if settings.disable or not settings.sampler:
            log_once(log, "logits_gather: V2 sampling from the shards is off (settings)")
            return None
        if getattr(config, "speculative_config", None) is not None:
            log_once(log, "logits_gather: speculative decoding: vLLM's sampler serves every step")
            return None
        if type(sampler).__name__ != "Sampler":
            log_once(log, f"logits_gather: vLLM's sampler is a {type(sampler).__name__}; route off")
            return None
        from .sampler import ShardSampler

        return ShardSampler(sampler, self, settings), None

    setattr(custom_sampler, _MARK, True)
    return custom_sampler


def _wrap_sample(original: Any) -> Any:
    from .sampler import ShardSampler

    @functools.wraps(original)
    def sample(self: Any, hidden_states: Any, input_batch: Any, grammar_output: Any = None):
        route = self.sampler
        if isinstance(route, ShardSampler):
            out = route.step(self, hidden_states, input_batch, grammar_output)
            if out is not None:
                return out
        return original(self, hidden_states, input_batch, grammar_output)

    setattr(sample, _MARK, True)
    return sample


def install() -> bool:
    """Wraps both seams once per process; False (logged) where this vLLM lacks one."""
    try:
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
        from vllm.v1.worker.gpu.model_states.interface import ModelState
    except Exception as exc:  # noqa: BLE001 - any import problem: vLLM stays stock
        log_once(log, f"logits_gather: no V2 model runner to hook ({type(exc).__name__}: {exc})")
        return False
    seams = (ModelState, "custom_sampler"), (GPUModelRunner, "sample")
    missing = [f"{c.__name__}.{n}" for c, n in seams if not callable(getattr(c, n, None))]
    if missing:
        log_once(log, f"logits_gather: this vLLM has no {', '.join(missing)}; route off")
        return False
    if not getattr(ModelState.custom_sampler, _MARK, False):
        ModelState.custom_sampler = _wrap_custom_sampler(ModelState.custom_sampler)
    if not getattr(GPUModelRunner.sample, _MARK, False):
        GPUModelRunner.sample = _wrap_sample(GPUModelRunner.sample)
    return True


__all__ = ["install"]
