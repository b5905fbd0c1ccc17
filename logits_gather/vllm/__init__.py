"""vLLM general plugin: swaps vLLM's ``LogitsProcessor`` for one that gathers through LogitsGather.

Install ``logits-gather[vllm]``; vLLM finds :func:`register` through the
``vllm.general_plugins`` entry point named ``logits_gather`` and calls it in
every process it starts (API server, engine core, each worker, before the
model is built). With ``VLLM_PLUGINS`` set, list ``logits_gather`` in it.

:func:`register` registers :class:`~logits_gather.vllm.processor.GatherLogitsProcessor`
as the out-of-tree replacement of the pluggable layer ``LogitsProcessor``
(``PluggableLayer.register_oot``): every later ``LogitsProcessor(...)`` in
model code builds the subclass, whose ``_gather_logits`` is the only override.
Subclasses that vLLM models define under other names keep vLLM's gather.

Settings: :mod:`logits_gather.vllm.settings`. Sizing and the memory check:
:mod:`logits_gather.vllm.memory`. Which path each call takes, and why the
results are consumed in time: :mod:`logits_gather.vllm.processor`.

The plugin logs through vLLM's logger: one line per process at registration,
and one line per rank and ``LogitsProcessor`` when it decides its path. A worker
whose log has no ``logits_gather:`` line did not load the plugin (vLLM logs an
entry point's ImportError as "Failed to load plugin logits_gather" and goes on
stock).
"""

from __future__ import annotations

import logging
import os

from ..logs import log_once
from .settings import DISABLE_ENV, Settings, env_disabled

log = logging.getLogger("logits_gather.vllm")


class _ToVllmLogger(logging.Handler):
    """Hands ``logits_gather`` records to the ``vllm`` logger, whose handlers
    (vLLM's format, stream and level) then decide what is printed."""

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
    """The ``vllm.general_plugins`` entry point; safe to call more than once.
    Bad ``LOGITS_GATHER_VLLM_*`` values raise here, which stops vLLM's start-up."""
    _route_logs_to_vllm()
    settings = Settings.load(None)  # validates the variables; additional_config comes later
    if env_disabled():
        log_once(log, f"logits_gather: vLLM plugin disabled by {DISABLE_ENV} (pid {os.getpid()})")
        return
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    if not all(hasattr(LogitsProcessor, name) for name in ("register_oot", "_gather_logits")):
        log.warning(
            "logits_gather: this vLLM's LogitsProcessor has no register_oot or "
            "_gather_logits (vLLM >= 0.20 is needed); leaving vLLM stock"
        )
        return
    from .processor import GatherLogitsProcessor

    current = op_registry_oot.get(LogitsProcessor.__name__)
    if current is GatherLogitsProcessor:
        return
    if current is not None:
        log.warning("logits_gather: LogitsProcessor is already replaced by %s; leaving it", current)
        return
    LogitsProcessor.register_oot(GatherLogitsProcessor)
    log_once(
        log,
        f"logits_gather: registered GatherLogitsProcessor in pid {os.getpid()} "
        f"(environment: {settings.describe()}; additional_config is read when the "
        "model is built)",
    )


__all__ = ["register"]
