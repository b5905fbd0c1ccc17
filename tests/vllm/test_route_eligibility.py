"""Which steps the V2 route serves, against the real vLLM's ``SamplingParams`` and seams.

Every fallback rule of ``logits_gather/vllm/eligible.py``, the per-step counting and
once-per-reason logging of ``ShardSampler.step``, and the two wrappers of
``logits_gather/vllm/hooks.py`` on the installed vLLM's ``ModelState`` and
``GPUModelRunner``.
"""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from logits_gather.vllm import eligible
from logits_gather.vllm.settings import Settings

pytestmark = pytest.mark.vllm
if os.environ.get("LOGITS_GATHER_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401 - CI's vLLM venv: a broken install must fail, not skip
else:
    pytest.importorskip("vllm", reason="needs the real vllm package (pip install -e .[vllm])")

V = 1000


def _reason(mode: str = "raw_logprobs", opt_in: bool = False, **kw) -> str | None:
    from vllm.sampling_params import SamplingParams

    return eligible.request_reason(SamplingParams(**kw), V, mode, opt_in)


def test_eligible_requests() -> None:
    assert _reason(temperature=0.0) is None
    assert _reason(temperature=0.8, seed=3) is None
    assert _reason(temperature=1.0, min_p=0.1) is None
    assert _reason(temperature=0.7, logprobs=5) is None
    assert _reason(temperature=0.0, logprobs=20) is None
    assert _reason(temperature=0.0, top_k=50) is None  # greedy: vLLM drops the filters
    assert _reason(opt_in=True, temperature=0.8, top_k=50, top_p=0.9) is None  # opted in
    assert _reason(temperature=0.8, top_k=V) is None  # k >= V: no filter


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"logit_bias": {3: 1.0}}, "logit bias"),
        ({"allowed_token_ids": [1, 2]}, "allowed token ids"),
        ({"min_tokens": 4}, "min_tokens"),
        ({"presence_penalty": 0.5}, "penalties"),
        ({"frequency_penalty": 0.5}, "penalties"),
        ({"repetition_penalty": 1.2}, "penalties"),
        ({"bad_words": ["x"]}, "bad words"),
        ({"logprobs": -1}, "logprobs=-1"),
        ({"logprobs": 21}, "logprobs=21"),
        ({"top_k": 50}, "top-k/top-p"),
        ({"top_p": 0.9}, "top-k/top-p"),
    ],
)
def test_ineligible_requests(kw: dict, want: str) -> None:
    got = _reason(temperature=0.8, **kw)
    assert got is not None and want in got, got


def test_optional_fields_and_modes() -> None:
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    assert "logprobs in mode processed_logprobs" in _reason("processed_logprobs", logprobs=2)
    assert _reason("processed_logprobs") is None  # no logprobs asked: the mode is moot
    assert eligible.request_reason(SamplingParams(top_k=50), V, "raw_logprobs", True) is None
    grammar = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+"))
    assert _reason_of(grammar) == "structured outputs"
    for name, value, want in (
        ("thinking_token_budget", 10, "thinking budget"),
        ("logprob_token_ids", [1, 2], "logprob_token_ids"),
    ):
        if name in SamplingParams.__struct_fields__:  # newer vLLM only
            assert _reason_of(SamplingParams(**{name: value})) == want


def _reason_of(params) -> str | None:
    return eligible.request_reason(params, V, "raw_logprobs", False)


def _sampler(**kw):
    base = dict(use_fp64_gumbel=False, compute_nans=False, trace_replay_state=None,
                return_sampling_mask=False, logits_processors=[])  # fmt: skip
    return type("Sampler", (), base | kw)()


def test_setup_reasons() -> None:
    runner = SimpleNamespace(vllm_config=SimpleNamespace(lora_config=None), batch_sharder=None)
    assert eligible.setup_reason(runner, _sampler()) is None
    cases = [
        (runner, type("GPUWatermarkSampler", (), {})(), "watermarking"),
        (SimpleNamespace(batch_sharder=object()), _sampler(), "batch-sharded"),
        (SimpleNamespace(vllm_config=SimpleNamespace(lora_config=1)), _sampler(), "LoRA"),
        (runner, _sampler(use_fp64_gumbel=True), "use_fp64_gumbel"),
        (runner, _sampler(compute_nans=True), "NANS"),
        (runner, _sampler(trace_replay_state=object()), "trace replay"),
        (runner, _sampler(return_sampling_mask=True), "return_sampling_mask"),
        (runner, _sampler(logits_processors=[type("Mine", (), {})()]), "custom logits"),
    ]
    for r, s, want in cases:
        got = eligible.setup_reason(r, s)
        assert got is not None and want in got, (want, got)


def _route(reasons: dict[int, str | None]):
    from logits_gather.vllm.sampler import ShardSampler

    states = SimpleNamespace(vocab_size=V)
    inner = _sampler(sampling_states=states)
    model = type("M", (torch.nn.Module,), {"compute_logits_local": lambda self, h: h})()
    state = SimpleNamespace(vllm_config=SimpleNamespace(model_config=None), model=model)
    route = ShardSampler(inner, state, Settings())
    route.reasons.update(reasons)
    return route


def _batch(rows: list[int], drafts: int = 0):
    return SimpleNamespace(
        idx_mapping_np=np.array(rows), logits_indices=torch.arange(len(rows)),
        num_draft_tokens=drafts,
    )  # fmt: skip


def test_step_fallbacks_are_counted_and_logged_once(caplog) -> None:
    runner = SimpleNamespace(vllm_config=SimpleNamespace(lora_config=None), batch_sharder=None)
    route = _route({0: None, 1: "penalties"})
    caplog.set_level(logging.INFO, logger="logits_gather")
    h = torch.zeros(2, 4)
    assert route.step(runner, h, _batch([0, 1]), None) is None
    assert route.step(runner, h, _batch([0, 1]), None) is None
    assert route.step(runner, h, _batch([0]), object()) is None
    assert route.step(runner, h, _batch([0], drafts=2), None) is None
    assert route.step(runner, h, _batch([0, 7]), None) is None
    assert route.counts == {"shards": 0, "vllm": 5}
    assert route.fallbacks == {
        "penalties": 2,
        "grammar bitmask": 1,
        "draft tokens (verification stays vLLM's)": 1,
        "a request added before the route": 1,
    }
    # One record per reason (the plugin may also hand it on to vLLM's logger).
    said = {id(r) for r in caplog.records if "serves steps with penalties" in r.getMessage()}
    assert len(said) <= 1
    setup = _route({0: None})
    setup.inner.use_fp64_gumbel = True
    assert setup.step(runner, h, _batch([0]), None) is None
    assert "use_fp64_gumbel" in next(iter(setup.fallbacks))


def test_hooks_wrap_the_installed_seams() -> None:
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.model_states.interface import ModelState

    from logits_gather.vllm import hooks
    from logits_gather.vllm.sampler import ShardSampler

    assert hooks.install() and hooks.install()  # idempotent
    wrapped = ModelState.custom_sampler
    assert getattr(wrapped, hooks._MARK) and getattr(GPUModelRunner.sample, hooks._MARK)

    def state(extra: dict | None = None, spec=None):
        config = SimpleNamespace(
            additional_config={"logits_gather": extra} if extra else {},
            speculative_config=spec,
            model_config=SimpleNamespace(logprobs_mode="raw_logprobs"),
        )
        return SimpleNamespace(vllm_config=config, model=None)

    inner = type("Sampler", (), {"sampling_states": SimpleNamespace(vocab_size=V)})()
    assert wrapped(state(), inner) is None  # off by default until the GPU engine check
    got = wrapped(state({"sampler": True}), inner)
    assert isinstance(got[0], ShardSampler) and got[1] is None and got[0].inner is inner
    assert wrapped(state({"sampler": False}), inner) is None
    assert wrapped(state({"disable": True}), inner) is None
    assert wrapped(state({"sampler": True}, spec=object()), inner) is None
    assert wrapped(state({"sampler": True}), type("GPUWatermarkSampler", (), {})()) is None

    class Served(ShardSampler):
        def step(self, runner, hidden, batch, grammar):
            return ("served", batch)

    runner = SimpleNamespace(sampler=Served.__new__(Served))
    assert GPUModelRunner.sample(runner, None, "batch", None) == ("served", "batch")
