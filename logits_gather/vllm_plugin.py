"""vLLM general plugin: swaps vLLM's ``LogitsProcessor`` for one that gathers through LogitsGather.

Install ``logits-gather[vllm]``; vLLM then finds :func:`register` through the
``vllm.general_plugins`` entry point named ``logits_gather`` and calls it in every
process it starts (API server, engine core, each worker). vLLM loads every
general plugin unless ``VLLM_PLUGINS`` is set; with it set, list
``logits_gather`` in it (comma separated) to keep this one.

:func:`register` registers :class:`~logits_gather.vllm_processor.GatherLogitsProcessor`
as the out-of-tree replacement of the pluggable layer ``LogitsProcessor``
(``PluggableLayer.register_oot``): every later ``LogitsProcessor(...)`` in
model code builds the subclass, whose ``_gather_logits`` is the only override.
Subclasses that vLLM models define under other names keep vLLM's gather.

Settings, read from the environment of each vLLM process:

``LOGITS_GATHER_VLLM_DISABLE`` (default ``0``)
    ``1``/``true``/``yes``/``on``: register nothing; vLLM stays stock.
``LOGITS_GATHER_VLLM_CAPACITY`` (default: from the scheduler config)
    Most rows (sampled tokens per step) one gather takes on the fast path. The
    default is ``max_num_seqs * (1 + num_speculative_tokens)``. Steps with more
    rows use vLLM's own all-gather. Memory per ``LogitsProcessor``: 3 slots of
    ``capacity x padded vocab`` in the logits dtype, in symmetric memory.
``LOGITS_GATHER_VLLM_BACKEND`` (default ``auto``)
    ``auto``: the symmetric-memory kernel where every TP rank can use it (CUDA,
    Triton, peer access), else vLLM's own all-gather. ``symm_mem``: the kernel or
    an error at the first gather. ``torch.distributed``: LogitsGather's
    torch.distributed path (what the CPU tests use; no faster than vLLM's).
``LOGITS_GATHER_TIMEOUT_S``
    The library's peer-wait timeout (see :class:`~logits_gather.LogitsGather`).

Bad values raise ``ValueError`` naming the variable, so vLLM fails at start-up.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

DISABLE_ENV = "LOGITS_GATHER_VLLM_DISABLE"
CAPACITY_ENV = "LOGITS_GATHER_VLLM_CAPACITY"
BACKEND_ENV = "LOGITS_GATHER_VLLM_BACKEND"
BACKENDS = ("auto", "symm_mem", "torch.distributed")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_logged: set[str] = set()


def log_once(message: str) -> None:
    """Logs ``message`` at INFO the first time this process sees it."""
    if message not in _logged:
        _logged.add(message)
        log.info(message)


@dataclass(frozen=True)
class Settings:
    """The plugin's environment settings (see the module docstring)."""

    disabled: bool = False
    capacity: int | None = None
    backend: str = "auto"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        flag = env.get(DISABLE_ENV, "").strip().lower()
        if flag not in _TRUE + _FALSE:
            raise ValueError(f"{DISABLE_ENV} must be one of 1/0/true/false/yes/no/on/off, "
                             f"got {env[DISABLE_ENV]!r}")
        capacity = None
        raw = env.get(CAPACITY_ENV, "").strip()
        if raw:
            try:
                capacity = int(raw)
            except ValueError:
                capacity = 0
            if capacity < 1:
                raise ValueError(f"{CAPACITY_ENV} must be a positive integer, got {raw!r}")
        backend = env.get(BACKEND_ENV, "").strip() or "auto"
        if backend not in BACKENDS:
            raise ValueError(f"{BACKEND_ENV} must be one of {', '.join(BACKENDS)}, "
                             f"got {backend!r}")
        return cls(disabled=flag in _TRUE, capacity=capacity, backend=backend)


def capacity_from_config(vllm_config: object) -> int:
    """``max_num_seqs * (1 + num_speculative_tokens)``: the most rows vLLM's
    runner hands ``compute_logits`` in one decode step."""
    seqs = int(vllm_config.scheduler_config.max_num_seqs)
    spec = getattr(vllm_config, "speculative_config", None)
    extra = int(getattr(spec, "num_speculative_tokens", None) or 0) if spec is not None else 0
    return seqs * (1 + extra)


class _ToVllmLogger(logging.Handler):
    """Hands ``logits_gather`` records to the ``vllm`` logger, whose handlers
    (vLLM's format, stream and level, or the root's where vLLM leaves logging
    alone) then decide what is printed."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger("vllm").handle(record)


def _route_logs_to_vllm() -> None:
    """Makes the path choice and the library's fallback reasons visible in vLLM's
    log, unless the application configured the ``logits_gather`` logger itself."""
    ours = logging.getLogger("logits_gather")
    if ours.handlers or ours.level != logging.NOTSET:
        return
    ours.addHandler(_ToVllmLogger())
    ours.setLevel(min(logging.INFO, logging.getLogger("vllm").getEffectiveLevel()))
    ours.propagate = False


def register() -> None:
    """The ``vllm.general_plugins`` entry point; safe to call more than once."""
    settings = Settings.from_env()
    _route_logs_to_vllm()
    if settings.disabled:
        log_once(f"logits_gather: vLLM plugin disabled by {DISABLE_ENV}")
        return
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    if not all(hasattr(LogitsProcessor, name) for name in ("register_oot", "_gather_logits")):
        log.warning("logits_gather: this vLLM's LogitsProcessor has no register_oot or "
                    "_gather_logits (vLLM >= 0.20 is needed); leaving vLLM stock")
        return
    from .vllm_processor import GatherLogitsProcessor

    current = op_registry_oot.get(LogitsProcessor.__name__)
    if current is GatherLogitsProcessor:
        return
    if current is not None:
        log.warning("logits_gather: LogitsProcessor is already replaced by %s; leaving it",
                    current)
        return
    LogitsProcessor.register_oot(GatherLogitsProcessor)
    log_once("logits_gather: vLLM LogitsProcessor replaced by GatherLogitsProcessor "
             f"(backend={settings.backend}, capacity="
             f"{settings.capacity or 'max_num_seqs * (1 + num_speculative_tokens)'})")


__all__ = ["Settings", "capacity_from_config", "register"]
