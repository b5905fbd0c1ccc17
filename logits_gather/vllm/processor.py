"""GatherLogitsProcessor: vLLM's LogitsProcessor with the TP logits gather done by LogitsGather.

By default only ``_gather_logits`` changes (LoRA's ``LogitsProcessorWithLoRA``
calls it too). vLLM's ``_get_logits`` still applies the LM head, calls the gather
and slices ``[..., :org_vocab_size]``; the fast path returns the ``[M, V_pad]`` rows
of a LogitsGather slot, with the values and strides of vLLM's own result. With the
setting ``fused_head``, ``_get_logits`` returns ``LogitsGather.linear(hidden,
lm_head.weight)[..., :org_vocab_size]`` instead, for calls that would take the fast
path with a head that :mod:`.head` accepts (an unquantized bf16/fp16
``VocabParallelEmbedding`` without bias, outside LoRA); each rank logs once per
instance why a head is not served.

Which path a call takes is the same on every TP rank (they run the same steps
with the same M, and every decision below is either per call or agreed):
vLLM's ``tensor_model_parallel_all_gather`` when TP is 1, when the platform
gathers to rank 0 only, when the rows are zero, not 2-D or not contiguous,
under torch.compile tracing, when the dtype differs from the first gather's,
when M exceeds the capacity, during CUDA-graph capture unless this instance
was built for capture, and for good once the fast path is refused. Otherwise
the instance's LogitsGather, built at the first eager call with at most
``rows`` rows (see :mod:`.memory`): in both model runners that is the
profiling ``_dummy_sampler_run``, so the build is counted by vLLM's KV-cache
sizing. Before building, every rank checks its free memory and the ranks
agree on vLLM's TP CPU group; after building they agree again that every rank
succeeded. Each rank logs its decision.

Lifetime (library contract: call k is good until call k+2 is issued; a
graph-mode result until the next graph-mode call, within one graph the next
but one). In vLLM 0.33.0:

* V1 runner: ``execute_model`` computes the logits and parks them;
  ``sample_tokens`` applies the grammar bitmask in place, then the Sampler
  reads them (``.to(float32)`` copies bf16/fp16); logprobs are new tensors.
  Prompt-logprob gathers and drafting come after. Exception: fp32 logits with
  ``logprobs_mode="processed_logits"``, whose logprobs alias the logits and are
  copied to the host later; those results are returned as copies.
* V2 runner: ``sample`` runs the sampler right after ``compute_logits``;
  prompt logprobs (1024-row chunks) consume each chunk before the next.
* Drafters build their own LogitsProcessor, hence their own LogitsGather,
  sized by their own rows. V2's EAGLE/MTP speculator captures "forward +
  compute_logits + sample" as one FULL graph; its instance is built with
  ``graphs=True`` during profiling (the speculator's dummy propose is eager),
  so captured calls take the fast path; each captured gather is consumed by
  the sample that follows it inside the same graph.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch
import torch.distributed as dist
from vllm.config import get_current_vllm_config
from vllm.distributed import get_tp_group
from vllm.model_executor.layers.logits_processor import LogitsProcessor

from ..gather import LogitsGather
from ..logs import log_once
from ..slots import slot_count
from . import head, hooks, memory
from .context import call_mode, current_role, needs_copy, speculator_captures_full
from .settings import CAPACITY_ENV, Settings

log = logging.getLogger("logits_gather.vllm")
_PENDING, _READY, _STOCK = "pending", "ready", "stock"


def _accepts(name: str) -> bool:
    return name in inspect.signature(LogitsGather.__init__).parameters


class GatherLogitsProcessor(LogitsProcessor):
    """``LogitsProcessor`` whose TP gather goes through :class:`~logits_gather.LogitsGather`.

    ``gather_counts`` counts this instance's gathers by path (``"logits_gather"``, ``"vllm"``).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = get_current_vllm_config()
        self._settings = Settings.load(getattr(config, "additional_config", None))
        self.role = current_role()
        self.rows = memory.rows_from_config(config, self.role == "drafter")
        self.graphs = self.role == "drafter" and speculator_captures_full(config)
        model_config = getattr(config, "model_config", None)
        self._logprobs_mode = getattr(model_config, "logprobs_mode", None)
        self.gather_capacity: int | None = None
        self._copy = self._capturable = False
        self._lg: LogitsGather | None = None
        self._state = _PENDING
        self.gather_counts = {"logits_gather": 0, "vllm": 0}
        self.head_route = head.HeadRoute(self._settings.fused_head, self._tag)
        self._own_head = False  # inside this class's _get_logits
        self._unlogged: str | None = None  # why settings keep vLLM's path, logged at 1st call
        if self._settings.disable or (self.role == "drafter" and not self._settings.drafters):
            self._state = _STOCK
            self._unlogged = f"settings ask for it ({self._settings.describe()})"
        self.local_only = False  # set by .sampler: _get_logits returns this rank's shard
        if self.role == "target" and self._settings.sampler and not self._settings.disable:
            hooks.install()  # V2 sampling from the shards (.sampler); idempotent

    def _gather_logits(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._own_head:
            self.head_route.foreign()
        lg = None
        if logits.dim() == 2 and logits.is_contiguous():
            lg = self._pick(logits.shape[0], logits.shape[1], logits.dtype, logits)
        if lg is not None:
            self.gather_counts["logits_gather"] += 1
            out = lg(logits)
            return out.clone() if self._copy else out
        self.gather_counts["vllm"] += 1
        return super()._gather_logits(logits)

    def _get_logits(
        self,
        hidden_states: torch.Tensor,
        lm_head: Any,
        embedding_bias: torch.Tensor | None,
        skip_gather: bool = False,
    ) -> torch.Tensor | None:
        """``fused_head``: ``linear`` applies the head where :mod:`.head` allows it."""
        if self.local_only:
            return super()._get_logits(hidden_states, lm_head, embedding_bias, skip_gather=True)
        lg, mode = None, call_mode(hidden_states)
        if not skip_gather and mode != "compiling":  # traced: vLLM's path, as the gather's
            lg = self.head_route.pick(
                hidden_states, lm_head, embedding_bias, self.head_dtype, mode, self._pick
            )
        if lg is None:  # vLLM's head, then _gather_logits
            self._own_head = True
            try:
                return super()._get_logits(hidden_states, lm_head, embedding_bias, skip_gather)
            finally:
                self._own_head = False
        self.gather_counts["logits_gather"] += 1
        out = self.head_route.apply(lg, hidden_states, lm_head.weight, mode)
        return (out.clone() if self._copy else out)[..., : self.org_vocab_size]

    def _pick(
        self, m: int, columns: int, dtype: torch.dtype, like: torch.Tensor
    ) -> LogitsGather | None:
        """The LogitsGather for ``m`` rows of ``columns``, or None for vLLM's gather."""
        if self._unlogged is not None:
            log.info("%s: vLLM's all-gather, because %s", self._tag(get_tp_group()), self._unlogged)
            self._unlogged = None
        if self._state is _STOCK:
            return None
        mode = call_mode(like)
        if m == 0 or mode == "compiling":
            return None
        if self._state is _PENDING:
            if mode != "eager" or m > self.rows:
                return None
            self._build(columns, dtype, like.device)
            if self._state is not _READY:
                return None
        lg = self._lg
        if m > lg.capacity:
            log_once(
                log,
                f"logits_gather: {self.role} steps with more than {lg.capacity} logit rows "
                f"use vLLM's all-gather (capacity / memory_mib, {CAPACITY_ENV})",
            )
            return None
        if columns != lg.columns or dtype is not lg.dtype:
            return None
        if mode == "capturing" and not self._capturable:
            return None
        return lg

    def _tag(self, tp: object) -> str:
        rank = dist.get_rank() if dist.is_initialized() else 0
        return (
            f"logits_gather [{self.role} LogitsProcessor, TP rank {tp.rank_in_group}/"
            f"{tp.world_size}, global rank {rank}]"
        )

    def _build(self, columns: int, dtype: torch.dtype, device: torch.device) -> None:
        """Collective over the TP group (every rank reaches it at the same call)."""
        tp = get_tp_group()
        s, world = self._settings, tp.world_size
        padded, item = columns * world, dtype.itemsize
        capacity = memory.capacity_for(
            self.rows, s.memory_mib, padded, item, self.graphs, s.capacity
        )
        needed = capacity * memory.row_bytes(padded, item, self.graphs)
        reason, seen = None, ""
        if world == 1:
            reason = "TP size is 1"
        elif not self.use_all_gather:
            reason = "this platform gathers logits to rank 0 only (use_all_gather() is False)"
        else:
            local = None
            if s.backend == "auto" and device.type != "cuda":
                local = (
                    f"logits are on {device} and the fast path needs CUDA "
                    "(backend=torch.distributed uses the library anyway)"
                )
            elif capacity < 1:
                local = (
                    f"memory_mib={s.memory_mib:g} is below one row "
                    f"({memory.row_bytes(padded, item, self.graphs)} bytes)"
                )
            else:
                try:  # whatever happens here, this rank must reach the agreement
                    local, seen = memory.fit_problem(device, needed, s.min_free_mib)
                except Exception as exc:  # noqa: BLE001 - reported to every rank below
                    local = f"free memory unreadable ({type(exc).__name__}: {exc})"
            everyone = memory.agree(tp.cpu_group, (local, capacity))
            reason = _joined([p for p, _ in everyone])
            if reason is None and len({c for _, c in everyone}) > 1:
                reason = (
                    f"ranks computed different capacities {[c for _, c in everyone]} "
                    "(do their settings differ?)"
                )
            if reason is None:
                reason = self._construct(tp, columns, dtype, device, capacity)
        if reason is not None:
            if s.backend == "symm_mem" and world > 1 and self.use_all_gather:
                raise RuntimeError(f"{self._tag(tp)}: backend=symm_mem is impossible: {reason}")
            self._state = _STOCK
            log.info("%s: vLLM's all-gather, because %s", self._tag(tp), reason)
            return
        lg = self._lg
        self._state, self.gather_capacity = _READY, lg.capacity
        self._copy = needs_copy(self._logprobs_mode, lg.dtype)
        self._capturable = self.graphs and lg.backend == "symm_mem"
        log.info(
            "%s: fast path (backend=%s, %s, %d rows x %d padded vocab, %d slots = %.1f MiB "
            "of symmetric memory; %s; timeout %gs, on_timeout=%s%s%s; settings: %s)",
            self._tag(tp),
            lg.backend,
            lg.dtype,
            lg.capacity,
            padded,
            slot_count(self.graphs),
            needed / memory.MIB,
            seen or "no memory check",
            lg.timeout_s,
            getattr(lg, "on_timeout", "raise (library has no on_timeout)"),
            ", CUDA-graph capture served" if self._capturable else "",
            ", fp32 results copied for processed_logits" if self._copy else "",
            s.describe(),
        )

    def _construct(
        self, tp: object, columns: int, dtype: torch.dtype, device: torch.device, capacity: int
    ) -> str | None:
        """Builds the LogitsGather; None on success on every rank, else the reason."""
        s = self._settings
        kwargs = dict(
            columns=columns,
            capacity=capacity,
            device=device,
            group=tp.device_group,
            dtype=dtype,
            backend=s.backend,
            timeout_s=s.timeout_s,
            graphs=self.graphs,
        )
        if _accepts("on_timeout"):
            kwargs["on_timeout"] = s.on_timeout
        else:
            log_once(
                log,
                "logits_gather: this LogitsGather has no on_timeout option: a timed-out "
                "gather returns incomplete logits and only the next call raises",
                logging.WARNING,
            )
        lg, failure = None, None
        try:
            with torch.inference_mode(False), torch.no_grad():  # normal tensors: docs/vllm.md
                lg = LogitsGather(**kwargs)
        except Exception as exc:  # noqa: BLE001 - agreed below, then re-raised or logged
            failure = f"LogitsGather could not be built ({type(exc).__name__}: {exc})"
        reason = _joined(memory.agree(tp.cpu_group, failure))
        if reason is None and s.backend == "auto" and lg.backend != "symm_mem":
            reason = "symmetric memory is unavailable on this TP group (reason logged above)"
        if reason is None:
            self._lg = lg
        return reason


def _joined(problems: list[str | None]) -> str | None:
    """One reason for the per-rank problems (None: no rank has one)."""
    found = [(r, p) for r, p in enumerate(problems) if p]
    if not found:
        return None
    if len(found) == len(problems) and len({p for _, p in found}) == 1:
        return found[0][1]
    return "; ".join(f"rank {r}: {p}" for r, p in found)


__all__ = [
    "GatherLogitsProcessor",
    "call_mode",
    "current_role",
    "needs_copy",
    "speculator_captures_full",
]
