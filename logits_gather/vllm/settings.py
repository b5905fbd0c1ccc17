"""The plugin's settings: vLLM's ``additional_config`` first, then ``LOGITS_GATHER_VLLM_*``.

``--additional-config '{"logits_gather": {"capacity": 128}}'`` is a field of
``VllmConfig``, which vLLM hands to every worker it starts (multiprocessing, Ray
and external launchers alike), so it reaches every rank. The environment
variables reach multiprocessing workers, and Ray workers of vLLM 0.33's
``RayExecutorV2`` (it forwards the driver's whole environment); engine-core Ray
actors (``--data-parallel-backend ray``) only get variables with vLLM's
prefixes unless ``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY=LOGITS_GATHER_`` is
set. A key given in ``additional_config`` wins over its variable.

=============  ================================  ========  ========================================
key            variable                          default   meaning
=============  ================================  ========  ========================================
disable        LOGITS_GATHER_VLLM_DISABLE        false     keep vLLM's all-gather everywhere
capacity       LOGITS_GATHER_VLLM_CAPACITY       (budget)  most rows per gather on the fast path
memory_mib     LOGITS_GATHER_VLLM_MEMORY_MIB     256       slot budget per LogitsProcessor (MiB)
min_free_mib   LOGITS_GATHER_VLLM_MIN_FREE_MIB   2048      GPU memory left free after a build
backend        LOGITS_GATHER_VLLM_BACKEND        auto      auto / symm_mem / torch.distributed
timeout_s      LOGITS_GATHER_VLLM_TIMEOUT_S      300       how long a gather waits for a peer
on_timeout     LOGITS_GATHER_VLLM_ON_TIMEOUT     trap      trap (abort on the device) / raise
drafters       LOGITS_GATHER_VLLM_DRAFTERS       true      serve speculative drafters too
fused_head     LOGITS_GATHER_VLLM_FUSED_HEAD     false     LM head by LogitsGather.linear
sampler        LOGITS_GATHER_VLLM_SAMPLER        false     V2 runner: eligible steps sample from
                                                           the vocab shards (docs/vllm.md)
sampler_top_k  LOGITS_GATHER_VLLM_SAMPLER_TOP_K  false     those steps may hold top-k/top-p rows
=============  ================================  ========  ========================================

Bad values raise ``ValueError`` naming the key or variable and the value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

log = logging.getLogger("logits_gather.vllm")

CONFIG_KEY = "logits_gather"
ENV_PREFIX = "LOGITS_GATHER_VLLM_"
DISABLE_ENV = ENV_PREFIX + "DISABLE"
CAPACITY_ENV = ENV_PREFIX + "CAPACITY"
BACKEND_ENV = ENV_PREFIX + "BACKEND"
BACKENDS = ("auto", "symm_mem", "torch.distributed")
ON_TIMEOUT = ("trap", "raise")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE + _FALSE:
        raise ValueError(f"{name} must be one of 1/0/true/false/yes/no/on/off, got {value!r}")
    return text in _TRUE


def _number(value: Any, name: str, kind: type, minimum: float) -> Any:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(str(value).strip()) if isinstance(value, str) else kind(value)
        if isinstance(value, float) and kind is int and value != number:
            raise ValueError
    except (TypeError, ValueError):
        number = None
    if number is None or not number >= minimum:
        raise ValueError(f"{name} must be a {kind.__name__} >= {minimum}, got {value!r}")
    return number


def _choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    text = str(value).strip()
    if text not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return text


@dataclass(frozen=True)
class Settings:
    """The plugin's settings (see the module docstring); ``sources`` says where
    each non-default one came from."""

    disable: bool = False
    capacity: int | None = None
    memory_mib: float = 256.0
    min_free_mib: float = 2048.0
    backend: str = "auto"
    timeout_s: float = 300.0
    on_timeout: str = "trap"
    drafters: bool = True
    fused_head: bool = False
    sampler: bool = False  # on once the GPU engine check passes (docs/vllm.md)
    sampler_top_k: bool = False
    sources: tuple[str, ...] = ()

    @classmethod
    def load(
        cls, additional_config: Any = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Reads ``additional_config["logits_gather"]`` (a dict or None) and the
        environment; validates every value."""
        env = os.environ if environ is None else environ
        section: Mapping[str, Any] = {}
        if isinstance(additional_config, Mapping):
            section = additional_config.get(CONFIG_KEY) or {}
            if not isinstance(section, Mapping):
                raise ValueError(
                    f"additional_config[{CONFIG_KEY!r}] must be a dict, got {section!r}"
                )
        names = [f.name for f in fields(cls) if f.name != "sources"]
        unknown = sorted(set(section) - set(names))
        if unknown:
            raise ValueError(
                f"additional_config[{CONFIG_KEY!r}] has unknown keys {unknown}; known: {names}"
            )
        values: dict[str, Any] = {}
        sources = []
        for name in names:
            variable = ENV_PREFIX + name.upper()
            if name in section and section[name] is not None:
                raw, label = section[name], f"additional_config[{CONFIG_KEY!r}][{name!r}]"
            elif env.get(variable, "").strip():
                raw, label = env[variable], variable
            else:
                continue
            values[name] = _parse(name, raw, label)
            sources.append(f"{name}={values[name]} ({label.split('[')[0]})")
        return cls(**values, sources=tuple(sources))

    def describe(self) -> str:
        return ", ".join(self.sources) if self.sources else "all defaults"


def _parse(name: str, raw: Any, label: str) -> Any:
    if name in ("disable", "drafters", "fused_head", "sampler", "sampler_top_k"):
        return _flag(raw, label)
    if name == "capacity":
        return _number(raw, label, int, 1)
    if name in ("memory_mib", "min_free_mib"):
        return _number(raw, label, float, 0)
    if name == "timeout_s":
        return _number(raw, label, float, 0.001)
    if name == "backend":
        return _choice(raw, label, BACKENDS)
    return _choice(raw, label, ON_TIMEOUT)


def env_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """``LOGITS_GATHER_VLLM_DISABLE`` alone (what ``register`` can see before
    vLLM's config exists)."""
    env = os.environ if environ is None else environ
    return _flag(env.get(DISABLE_ENV, ""), DISABLE_ENV)


__all__ = ["BACKENDS", "CONFIG_KEY", "Settings", "env_disabled"]
