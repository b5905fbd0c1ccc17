"""The shape of ``logits_gather.sampling``'s API (no communication): which arguments are
positional, their order, and what imports without Triton. The errors themselves run
on every rank in ``tests/sampling/test_sampling.py`` (``_bad_inputs``)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from logits_gather import LogitsGather, sampling
from logits_gather.sampling import VocabParallelSampler

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _split(fn) -> tuple[list[str], list[str]]:
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    return (
        [p.name for p in params if p.kind in POSITIONAL],
        [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY],
    )


def test_filters_and_group_are_keyword_only() -> None:
    """Positional: the tensors (and ``positions``, None meaning 0); keyword-only: every
    filter, ``top_n`` and ``group``, in the functions and the sampler's methods alike."""
    sample = (["shard", "temperature", "seed", "positions"], ["top_k", "top_p", "min_p"])
    assert _split(sampling.sample) == (sample[0], [*sample[1], "group"])
    assert _split(VocabParallelSampler.sample) == sample
    assert inspect.signature(sampling.sample).parameters["positions"].default is None
    assert _split(sampling.greedy) == (["shard"], ["group"])
    assert _split(VocabParallelSampler.greedy) == (["shard"], [])
    assert _split(sampling.logprobs) == (["shard", "token_ids"], ["top_n", "group"])
    assert _split(VocabParallelSampler.logprobs) == (["shard", "token_ids"], ["top_n"])
    assert _split(sampling.cached_sampler) == (["shard"], ["group"])
    assert _split(sampling.free_samplers) == ([], [])


def test_sampler_arguments_in_logits_gather_order() -> None:
    """``VocabParallelSampler`` and ``LogitsGather`` share their leading positional
    arguments, and the keywords they share come in the same order."""
    ours, our_kw = _split(VocabParallelSampler.__init__)
    theirs, their_kw = _split(LogitsGather.__init__)
    assert ours == ["columns", "capacity", "device", "group"] == theirs[:4]
    shared = [n for n in theirs + their_kw if n in our_kw]
    assert shared == [n for n in our_kw if n in theirs + their_kw]
    assert shared == ["backend", "timeout_s", "on_timeout", "check_calls"]


def test_imports_without_triton() -> None:
    """Where Triton does not import (made so here), the package imports, and
    ``sampling.reference`` is an attribute."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "from logits_gather import sampling\n"
        "print(sampling.reference.sample.__module__, sampling.VocabParallelSampler.__name__)"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["logits_gather.sampling.reference", "VocabParallelSampler"]
