"""Top-k and top-p tokens of ``sampling.sample`` (world size 1) against vLLM 0.33's own
pipeline on the same logits on one GPU: ``apply_temperature``, the Triton
``apply_top_k_top_p_triton``, ``gumbel_sample``. (Greedy, temperature and min-p are
bit-identical and asserted in ``tests/sampling/test_vllm_fused.py``.)

vLLM's pivot-based top-k/top-p kernel has its own tie and rounding rules, so this prints
the share of rows with equal tokens, and explains every row that differs by comparing
the two kept sets on vLLM's own scaled logits: equal sets (which would be a bug here),
a tie at the cut (the sets differ only in elements equal to the cut value), or a
rounding at the cut (top-p's mass summed another way). Needs the packed vLLM files on
the path (docs/gpu-testing.md).
"""

from __future__ import annotations

import os
from collections import Counter

import torch
import torch.distributed as dist
from vllm.v1.sample.ops.topk_topp_triton import apply_top_k_top_p_triton
from vllm.v1.worker.gpu.sample.gumbel import apply_temperature, gumbel_sample

from logits_gather import sampling
from logits_gather.sampling import reference

V = 151552
CASES = {"top_k=50": (50, None), "top_p=0.9": (None, 0.9), "top_k=50 top_p=0.9": (50, 0.9)}


def vllm(logits, temp, seeds, pos, k, p):
    """vLLM's tokens, its scaled fp32 logits, and its kept set (finite after masking)."""
    m, dev = logits.shape[0], logits.device
    idx = torch.arange(m, dtype=torch.int32, device=dev)
    x = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    apply_temperature(x, idx, temp)
    s = x.clone()
    kk = None if k is None else torch.full((m,), k, dtype=torch.int32, device=dev)
    pp = None if p is None else torch.full((m,), p, dtype=torch.float32, device=dev)
    x = apply_top_k_top_p_triton(x, kk, pp, has_topp_only_rows=kk is None)
    keep = x > float("-inf")
    tok = gumbel_sample(x, idx, temp, seeds, pos, apply_temperature=False, is_drafting=False)
    return tok, s, keep


def why(s_row, ours, theirs) -> str:
    if torch.equal(ours, theirs):
        return "kept sets equal (unexplained)"
    differ = ours ^ theirs
    cut = torch.where(ours & theirs, s_row, float("inf")).min()  # lowest value both keep
    if bool((s_row[differ] == cut).all()):
        return "tie at the cut"
    return "rounding at the cut"


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    sampler = sampling.VocabParallelSampler(V, 256, device=dev)
    for dtype in (torch.bfloat16, torch.float32):
        for name, (k, p) in CASES.items():
            rows, equal, sets_equal, reasons = 0, 0, 0, Counter()
            for _ in range(4):
                m = 256
                x = (torch.randn(m, V, generator=gen, device=dev) * 4).to(dtype)
                x[::8, :200] = x[::8, :1]  # runs of equal values at the top
                temp = torch.tensor([1.0, 0.7, 1.3, 0.5], device=dev)[torch.arange(m) % 4]
                seeds = torch.randint(-(2**62), 2**62, (m,), generator=gen, device=dev)
                pos = torch.randint(0, 2**20, (m,), generator=gen, device=dev)
                got = sampler.sample(x, temp, seeds, pos, top_k=k, top_p=p)
                want, s, vkeep = vllm(x, temp, seeds, pos, k, p)
                okeep, _ = reference.kept(s, top_k=k, top_p=p)
                rows += m
                same = got == want
                equal += int(same.sum())
                sets_equal += int((okeep == vkeep).all(1).sum())
                for r in (~same).nonzero().flatten().tolist():
                    reasons[why(s[r], okeep[r], vkeep[r])] += 1
            print(f"{dtype} {name}: tokens equal {equal}/{rows} ({equal / rows:.4f}); "
                  f"kept sets equal {sets_equal}/{rows}; differing rows: "
                  f"{dict(reasons) or 'none'}", flush=True)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
