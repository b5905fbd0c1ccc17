"""ShardSampler: vLLM's V2 ``Sampler``, with eligible steps sampled from the vocab shards.

:mod:`.hooks` installs it as the runner's ``sampler`` (through the model state's
``custom_sampler`` seam) and sends the runner's ``sample()`` to :meth:`ShardSampler.step`
first. Everything else (``add_request``, ``sampling_states``, ``penalties_state``, the
profiling call, every step it declines) goes to vLLM's own ``Sampler`` unchanged.

A step it serves (:mod:`.eligible` says which): each TP rank computes its local logits
``[M, N]`` (the model's ``compute_logits_local``, else :class:`.processor.GatherLogitsProcessor`
in local mode), sets columns past vLLM's vocabulary (padding) to ``-inf``, and calls a
:class:`~logits_gather.sampling.VocabParallelSampler` on vLLM's TP group with the
per-row temperature, seed, top-k, top-p and min-p that vLLM's sampler reads
(``sampling_states`` through ``expanded_idx_mapping``) and the positions
``input_batch.positions[input_batch.logits_indices]``. It returns vLLM's
``SamplerOutput``: int64 tokens ``[M, 1]``, ``raw_logprobs`` (sampled token first, then
the top ``n``, fp32, with the sampled token's rank), and vLLM's own ``num_sampled`` /
``num_rejected``.

``counts`` (``"shards"``, ``"vllm"``) and ``fallbacks`` (per reason) count the steps;
each reason is logged once per process.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..logs import log_once
from ..sampling import VocabParallelSampler
from . import eligible
from .settings import Settings

log = logging.getLogger("logits_gather.vllm")
NO_LOGPROBS = -1


def _fields(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(getattr(cls, "_fields", ()))


def _build(cls: Any, **values: Any) -> Any:
    """``cls(**values)`` for the fields this vLLM's ``cls`` has (versions differ)."""
    names = _fields(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


class ShardSampler:
    """vLLM's ``Sampler`` ``inner`` with :meth:`step` for the runner's ``sample()``."""

    def __init__(self, inner: Any, model_state: Any, settings: Settings) -> None:
        self.inner = inner
        self.model_state = model_state
        self.settings = settings
        config = model_state.vllm_config
        self.logprobs_mode = str(getattr(config.model_config, "logprobs_mode", "raw_logprobs"))
        self.vocab = int(inner.sampling_states.vocab_size)
        self.reasons: dict[int, str | None] = {}
        self.counts = {"shards": 0, "vllm": 0}
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.setup: str | None = None  # why no step can take the route, once known
        self.checked = False
        self.vps: VocabParallelSampler | None = None

    def __getattr__(self, name: str) -> Any:  # everything else is vLLM's sampler's
        return getattr(self.inner, name)

    def __call__(self, logits: torch.Tensor, input_batch: Any) -> Any:
        return self.inner(logits, input_batch)

    def add_request(self, req_idx: int, sampling_params: Any) -> None:
        self.inner.add_request(req_idx, sampling_params)
        reason = eligible.request_reason(
            sampling_params, self.vocab, self.logprobs_mode, self.settings.sampler_top_k
        )
        masks = getattr(self.inner, "may_mask_logits", None)
        states = self.inner.sampling_states
        if reason is None and masks is not None and hasattr(states, "masks_logits"):
            if bool(masks[req_idx]) and not states.masks_logits(req_idx):
                reason = "a logits processor modifies this request's logits"
        self.reasons[req_idx] = reason

    # -- the step -------------------------------------------------------------------
    def step(self, runner: Any, hidden_states: torch.Tensor, input_batch: Any, grammar: Any):
        """vLLM's ``sample()`` result for an eligible step, else None (vLLM's path)."""
        if not self.checked:
            self.checked = True
            self.setup = eligible.setup_reason(runner, self.inner) or self._source_problem()
        rows = input_batch.idx_mapping_np
        reason = self.setup or eligible.step_reason(
            grammar,
            int(getattr(input_batch, "num_draft_tokens", 0)),
            [self.reasons.get(int(i), "a request added before the route") for i in rows],
        )
        if reason is None and len(rows) != input_batch.logits_indices.shape[0]:
            reason = "more than one logits row per request"
        if reason is not None:
            self.counts["vllm"] += 1
            self.fallbacks[reason] += 1
            log_once(log, f"logits_gather: vLLM's sampler serves steps with {reason}")
            return None
        local = self._local_logits(hidden_states[input_batch.logits_indices])
        out = self._sample(runner, local, input_batch)
        self.counts["shards"] += 1
        return out, out.num_sampled, out.num_rejected

    def _source_problem(self) -> str | None:
        model = self.model_state.model
        if hasattr(model, "compute_logits_local") or self._processor() is not None:
            return None
        return "the model has no compute_logits_local and no GatherLogitsProcessor"

    def _processor(self) -> Any:
        """The model's one ``GatherLogitsProcessor``, found by its ``local_only`` switch
        (processor.py installs the hooks that import this module, so no import back)."""
        found = [m for m in self.model_state.model.modules() if hasattr(m, "local_only")]
        return found[0] if len(found) == 1 else None

    def _local_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """This rank's ``[M, N]`` logits, columns past vLLM's vocabulary at -inf."""
        model = self.model_state.model
        if hasattr(model, "compute_logits_local"):
            local = model.compute_logits_local(hidden)
        else:
            proc = self._processor()
            proc.local_only = True
            try:
                local = self.model_state.compute_sample_logits(hidden)
            finally:
                proc.local_only = False
        n = local.shape[1]
        cut = self.vocab - self._rank() * n
        if cut < n:
            local[:, max(cut, 0) :] = float("-inf")
        return local

    def _group(self) -> Any:
        from vllm.distributed import get_tp_group

        return get_tp_group().device_group

    def _rank(self) -> int:
        from vllm.distributed import get_tp_group

        return get_tp_group().rank_in_group

    def _sampler(self, runner: Any, local: torch.Tensor) -> VocabParallelSampler:
        if self.vps is None:  # every rank reaches its first routed step together
            s = self.settings
            with torch.inference_mode(False), torch.no_grad():
                self.vps = VocabParallelSampler(
                    local.shape[1],
                    int(getattr(runner, "max_num_reqs", local.shape[0])),
                    local.device,
                    self._group(),
                    backend=s.backend,
                    timeout_s=s.timeout_s,
                    on_timeout=s.on_timeout,
                    check_values=False,
                )
            self.vps.grow = True
            log.info("logits_gather: V2 sampling from the vocab shards: %r", self.vps)
        return self.vps

    def _sample(self, runner: Any, local: torch.Tensor, batch: Any) -> Any:
        vps = self._sampler(runner, local)
        st, idx, rows = self.inner.sampling_states, batch.expanded_idx_mapping, batch.idx_mapping_np
        temperature = st.temperature.gpu[idx]
        if np.all(st.temperature.np[rows] == 0.0):
            tokens = vps.greedy(local)
        else:
            k = p = mp = None
            if np.any(st.min_p.np[rows] != 0.0):
                mp = st.min_p.gpu[idx]
            if np.any(st.top_k.np[rows] < self.vocab):
                k = st.top_k.gpu[idx].to(torch.int64)
                k = k.masked_fill(k >= self.vocab, 0)
            if np.any(st.top_p.np[rows] < 1.0):
                p = st.top_p.gpu[idx]
            pos = batch.positions[batch.logits_indices]
            tokens = vps.sample(
                local, temperature, st.seeds.gpu[idx], pos, top_k=k, top_p=p, min_p=mp
            )
        n = int(np.max(st.num_logprobs[rows], initial=NO_LOGPROBS))
        logprobs = None if n == NO_LOGPROBS else self._logprobs(vps, local, tokens, n)
        return self._output(runner, batch, tokens, logprobs)

    def _logprobs(self, vps: VocabParallelSampler, local: torch.Tensor, tokens, n: int) -> Any:
        from vllm.v1.outputs import LogprobsTensors

        got = vps.logprobs(local, tokens, top_n=n)
        ids = torch.cat((tokens[:, None], got.top_ids.to(torch.int64)), 1)
        scores = torch.cat((got.logprobs[:, None], got.top_logprobs), 1)
        return _build(
            LogprobsTensors,
            logprob_token_ids=ids,
            logprobs=scores,
            selected_token_ranks=self._ranks(local, tokens),
            cu_num_generated_tokens=None,
            cu_num_generated_tokens_tensor=None,
        )

    def _ranks(self, local: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """vLLM's rank of the sampled token: how many logits are >= its logit."""
        n, group = local.shape[1], self._group()
        rel = tokens - self._rank() * n
        own = (rel >= 0) & (rel < n)
        x = local.gather(1, rel.clamp(0, n - 1)[:, None])[:, 0].to(torch.float32)
        x = torch.where(own, x, torch.zeros_like(x))
        many = dist.get_world_size(group) > 1
        if many:
            dist.all_reduce(x, group=group)  # exactly one rank owns each token
        count = (local >= x.to(local.dtype)[:, None]).sum(1, dtype=torch.int64)
        if many:
            dist.all_reduce(count, group=group)
        return count

    def _output(self, runner: Any, batch: Any, tokens: torch.Tensor, logprobs: Any) -> Any:
        from vllm.v1.worker.gpu.input_batch import get_num_sampled_and_rejected
        from vllm.v1.worker.gpu.sample.output import SamplerOutput

        num_sampled, num_rejected = get_num_sampled_and_rejected(
            batch.seq_lens.new_ones(batch.num_reqs),
            batch.seq_lens,
            batch.cu_num_logits,
            batch.idx_mapping,
            self.inner.req_states.prefill_len.gpu,
        )
        return _build(
            SamplerOutput,
            sampled_token_ids=tokens.view(-1, 1),
            logprobs_tensors=logprobs,
            num_nans=None,
            num_sampled=num_sampled,
            num_rejected=num_rejected,
            sampling_mask_tensors=None,
        )


__all__ = ["ShardSampler"]
