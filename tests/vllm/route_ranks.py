"""Rank bodies for ``test_route_oracle.py``: vLLM's own V2 ``Sampler`` against the route.

Each rank runs under ``TRITON_INTERPRET=1`` with ``CUDA_VISIBLE_DEVICES=""`` (vLLM's
``triton_utils`` then keeps Triton: no driver is expected "in a distributed
environment"), so vLLM's own Triton kernels (temperature, min-p, ``gumbel_sample``,
logprobs, ``get_num_sampled_and_rejected``) run on CPU tensors. Every rank builds the
real ``Sampler`` (and ``RequestState``) through their constructors, adds requests with
``SamplingParams``, and samples the full logits with it; the route (a
:class:`~logits_gather.vllm.sampler.ShardSampler` wrapping that same ``Sampler``) samples
this rank's shard of the padded vocabulary. Both outputs go back to the test.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

VOCAB, MAX_REQS = 1000, 16
TEMPS = (0.0, 1.0, 0.7, 1.3, 0.05, 2.0)


def params(gen: torch.Generator, m: int, min_p: bool, logprobs: int | None) -> list:
    """Per-row temperatures (0 and 1 included), explicit 64-bit seeds on 3 rows of 4
    (vLLM draws the others), min-p 0 / 0.05 / 0.3."""
    from vllm.sampling_params import SamplingParams

    out = []
    for i in range(m):
        t = TEMPS[i % len(TEMPS)]
        seed = None if i % 4 == 3 else int(torch.randint(-(2**62), 2**62, (1,), generator=gen))
        mp = (0.0, 0.05, 0.3)[i % 3] if min_p and t != 0.0 else 0.0
        out.append(SamplingParams(temperature=t, seed=seed, min_p=mp, logprobs=logprobs))
    return out


def _shard_model(full: torch.Tensor, rank: int, world: int, padded: int):
    """A model whose ``compute_logits_local`` returns rows of ``full`` (the hidden
    states are row indices), with garbage in the padding columns."""
    n = padded // world
    wide = torch.full((full.shape[0], padded), 1e4, dtype=full.dtype)  # padding: huge
    wide[:, : full.shape[1]] = full
    shard = wide[:, rank * n : (rank + 1) * n]

    class Model(torch.nn.Module):
        def compute_logits_local(self, hidden: torch.Tensor) -> torch.Tensor:
            return shard[hidden.long()].clone()

    return Model()


def _batch(m: int, positions: torch.Tensor, req_idx: list[int]):
    """The fields of vLLM's ``InputBatch`` that the sampler and the route read."""
    idx = torch.tensor(req_idx, dtype=torch.int32)
    return SimpleNamespace(
        num_reqs=m,
        num_draft_tokens=0,
        idx_mapping=idx,
        idx_mapping_np=np.array(req_idx, dtype=np.int32),
        expanded_idx_mapping=idx,
        expanded_local_pos=torch.zeros(m, dtype=torch.int32),
        cu_num_logits=torch.arange(m + 1, dtype=torch.int32),
        cu_num_logits_np=np.arange(m + 1, dtype=np.int32),
        logits_indices=torch.arange(m, dtype=torch.int64),
        positions=positions,
        input_ids=torch.zeros(m, dtype=torch.int32),
        seq_lens=positions.to(torch.int32) + 1,
        seq_lens_cpu_upper_bound=positions.to(torch.int32) + 1,
    )


def compare(rank: int, world: int, cases: list[dict]) -> list[dict]:
    """For each case: vLLM's and the route's tokens, logprobs, ranks and counts."""
    from tests.sampling.vllm_oracle import _interpreter_index_fix
    from tests.vllm.test_plugin import vllm_ranks

    _interpreter_index_fix()
    import vllm.v1.worker.gpu.buffer_utils as buffers

    # No CUDA here: vLLM's explicit-copy buffers on the CPU platform, not UVA.
    buffers.is_uva_available = buffers.is_pin_memory_available = lambda: False
    from vllm.v1.worker.gpu.sample.sampler import Sampler
    from vllm.v1.worker.gpu.states import RequestState

    from logits_gather.vllm.sampler import ShardSampler
    from logits_gather.vllm.settings import Settings

    out = []
    model_config = SimpleNamespace(logprobs_mode="raw_logprobs")
    with vllm_ranks(rank, world) as config:
        for case in cases:
            states = RequestState(MAX_REQS, 2048, 2048, 0, VOCAB, torch.device("cpu"))
            inner = Sampler(config, MAX_REQS, VOCAB, torch.device("cpu"), states)
            gen = torch.Generator().manual_seed(case["seed"])
            m, dtype = case["m"], case["dtype"]
            full = (torch.randn(m, VOCAB, generator=gen) * case["scale"]).to(dtype)
            slots = torch.randperm(MAX_REQS, generator=gen)[:m].tolist()
            model_state = SimpleNamespace(
                vllm_config=SimpleNamespace(model_config=model_config),
                model=_shard_model(full, rank, world, case["padded"]),
            )
            route = ShardSampler(inner, model_state, Settings(sampler_top_k=True))
            # vLLM seeds NumPy alike on every worker (ModelConfig.seed): the seeds it
            # draws for requests without one are then the same on every rank.
            np.random.seed(case["seed"])
            rows = params(gen, m, case["min_p"], case["logprobs"])
            for slot, p in zip(slots, rows, strict=True):
                route.add_request(slot, p)
            route.apply_staged_writes()
            positions = torch.randint(0, 2**31 - 1, (m,), generator=gen)
            batch = _batch(m, positions, slots)
            want = inner(full, batch)
            runner = SimpleNamespace(max_num_reqs=MAX_REQS, vllm_config=config)
            got = route.step(runner, torch.arange(m), batch, None)
            assert got is not None, route.fallbacks
            got = got[0]
            rec = {
                "name": case["name"],
                "want": want.sampled_token_ids.flatten().tolist(),
                "got": got.sampled_token_ids.flatten().tolist(),
                "dtype": str(got.sampled_token_ids.dtype),
                "shape": tuple(got.sampled_token_ids.shape),
                "sampled": (got.num_sampled.tolist(), want.num_sampled.tolist()),
                "counts": dict(route.counts),
                "dtype_in": str(dtype),
            }
            if want.logprobs_tensors is not None:
                w, g = want.logprobs_tensors, got.logprobs_tensors
                rec["lp_ids"] = (g.logprob_token_ids.tolist(), w.logprob_token_ids.tolist())
                rec["lp_err"] = float((g.logprobs - w.logprobs).abs().max())
                rec["lp_dtype"] = (str(g.logprobs.dtype), str(w.logprobs.dtype))
                x = full.gather(1, got.sampled_token_ids)
                rec["ranks"] = (g.selected_token_ranks.tolist(), w.selected_token_ranks.tolist())
                rec["ranks_torch"] = (full >= x).sum(1).tolist()  # vLLM's _ranks_kernel
            out.append(rec)
    return out
