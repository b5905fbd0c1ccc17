"""GatherLogitsProcessor: vLLM's LogitsProcessor with the TP logits gather done by LogitsGather.

Only ``_gather_logits`` changes. vLLM's ``_get_logits`` still applies the LM
head, calls the gather, and slices ``[..., :org_vocab_size]``, so vocab padding
and the slice are vLLM's own. The fast path returns the ``[M, V_pad]`` rows of a
LogitsGather slot: same values and the same strides as vLLM's freshly
allocated ``[M, V_pad]`` result.

Which path runs (the same on every TP rank, since all of them see the same
batch): vLLM's ``tensor_model_parallel_all_gather`` when TP is 1, when the
platform does not all-gather logits (``use_all_gather()`` false), when the
rows are more than the capacity, zero, not 2-D, or not contiguous, when the
dtype differs from the first gather's, during CUDA graph capture or torch.compile
tracing (vLLM's collective is capture-safe there), and for good once the fast
path proves unavailable. Otherwise the instance's LogitsGather, built lazily by
the first eligible gather, which every TP rank reaches together because they
run the same model step. The choice is logged once per process.

Lifetime. A fast-path result is valid for work enqueued before this instance's
second-next gather (library contract: call k is good until call k+2 is
issued). Where the logits go in vLLM 0.33.0:

* V1 runner (``v1/worker/gpu_model_runner.py``): ``execute_model`` calls
  ``compute_logits`` once and parks the logits in ``execute_model_state``;
  ``execute_model`` refuses to run again until ``sample_tokens`` consumed them.
  ``sample_tokens`` applies the grammar bitmask in place, then ``Sampler``
  (``v1/sample/sampler.py``) reads them on the current stream: ``.to(float32)``
  copies bf16/fp16 logits before any processing; logprobs are new tensors;
  the rejection sampler indexes (copies). Only then do prompt logprobs
  (``_get_prompt_logprobs_dict``, more gathers on this instance) and drafting
  run. One exception: fp32 logits with ``logprobs_mode="processed_logits"``
  and full-vocab logprobs, where the sampler's returned logprobs alias the
  logits and ``AsyncGPUModelRunnerOutput`` copies them to the host on a side
  stream after those prompt-logprob gathers. For fp32 logits under
  ``processed_logits`` this class therefore returns a copy.
* V2 runner (``v1/worker/gpu/model_runner.py``): ``sample`` runs the sampler
  right after ``compute_logits``; every output it keeps (top-k scores,
  sampling masks, draft-logit caches) is a new tensor or a copy.
* Drafters and MTP heads build their own ``LogitsProcessor``, hence their own
  LogitsGather and slots; the V2 speculator's captured graphs take vLLM's path.
* In-place writes by vLLM (``logits *= scale``, bitmasks, LoRA deltas) land in
  the slot this call owns, in stream order.
"""

from __future__ import annotations

import torch
from vllm.config import get_current_vllm_config
from vllm.distributed import get_tp_group
from vllm.model_executor.layers.logits_processor import LogitsProcessor

from .gather import LogitsGather
from .vllm_plugin import BACKEND_ENV, CAPACITY_ENV, Settings, capacity_from_config, log_once

_PENDING, _READY, _STOCK = "pending", "ready", "stock"


def needs_copy(logprobs_mode: str | None, dtype: torch.dtype) -> bool:
    """True where vLLM may read the logits after the next-but-one gather (see
    the module docstring): fp32 logits under ``processed_logits``."""
    return logprobs_mode == "processed_logits" and dtype == torch.float32


def _capturing_or_compiling(logits: torch.Tensor) -> bool:
    if torch.compiler.is_compiling():
        return True
    return logits.is_cuda and torch.cuda.is_current_stream_capturing()


class GatherLogitsProcessor(LogitsProcessor):
    """``LogitsProcessor`` whose TP gather goes through :class:`~logits_gather.LogitsGather`.

    ``gather_counts`` counts this instance's gathers by path (``"logits_gather"``,
    ``"vllm"``).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._settings = Settings.from_env()
        config = get_current_vllm_config()
        self.gather_capacity: int = self._settings.capacity or capacity_from_config(config)
        model_config = getattr(config, "model_config", None)
        self._logprobs_mode = getattr(model_config, "logprobs_mode", None)
        self._copy = False
        self._lg: LogitsGather | None = None
        self._state = _PENDING
        self.gather_counts = {"logits_gather": 0, "vllm": 0}

    def _gather_logits(self, logits: torch.Tensor) -> torch.Tensor:
        if self._state is not _STOCK and self._eligible(logits):
            lg = self._lg if self._state is _READY else self._build(logits)
            if lg is not None and logits.dtype is lg.dtype:
                self.gather_counts["logits_gather"] += 1
                out = lg(logits)
                return out.clone() if self._copy else out
        self.gather_counts["vllm"] += 1
        return super()._gather_logits(logits)

    def _eligible(self, logits: torch.Tensor) -> bool:
        """Per-call conditions; each is the same on every TP rank."""
        if logits.dim() != 2 or not logits.is_contiguous():
            return False
        m = logits.shape[0]
        if m > self.gather_capacity:
            log_once(f"logits_gather: steps with more than {self.gather_capacity} logit rows use "
                     f"vLLM's all-gather (raise {CAPACITY_ENV} to change that)")
            return False
        return m > 0 and not _capturing_or_compiling(logits)

    def _build(self, logits: torch.Tensor) -> LogitsGather | None:
        """Collective over the TP group: the first eligible gather on every rank."""
        tp = get_tp_group()
        backend = self._settings.backend
        device = logits.device
        reason = None
        if tp.world_size == 1:
            reason = "TP size is 1"
        elif not self.use_all_gather:
            reason = "this platform gathers logits to rank 0 only (use_all_gather() is False)"
        elif backend == "auto" and device.type != "cuda":
            reason = (f"logits are on {device} and the fast path needs CUDA "
                      f"(set {BACKEND_ENV}=torch.distributed to use the library anyway)")
        lg = None
        if reason is None:
            try:
                lg = LogitsGather(columns=logits.shape[1], capacity=self.gather_capacity,
                                  device=device, group=tp.device_group, dtype=logits.dtype,
                                  backend=backend, graphs=False)
            except (RuntimeError, TypeError, ValueError) as exc:
                if backend == "symm_mem":
                    raise
                reason = f"LogitsGather could not be built ({type(exc).__name__}: {exc})"
            if lg is not None and backend == "auto" and lg.backend != "symm_mem":
                reason = "symmetric memory is unavailable on this TP group (reason logged above)"
                lg = None
        if lg is None:
            self._state = _STOCK
            log_once(f"logits_gather: LogitsProcessor keeps vLLM's all-gather because {reason}")
            return None
        self._lg, self._state = lg, _READY
        self._copy = needs_copy(self._logprobs_mode, lg.dtype)
        log_once(f"logits_gather: LogitsProcessor gathers through LogitsGather "
                 f"(backend={lg.backend}, tp={lg.world_size}, {lg.columns} columns per rank, "
                 f"{lg.dtype}, up to {lg.capacity} rows"
                 + (", copying fp32 results for processed_logits" if self._copy else "") + ")")
        return lg


__all__ = ["GatherLogitsProcessor", "needs_copy"]
