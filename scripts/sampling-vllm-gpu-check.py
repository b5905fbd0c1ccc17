"""Tokens of ``sampling.sample`` / ``greedy`` (world size 1) against vLLM 0.33's own V2
kernels run on the same logits on one GPU: greedy, temperature, min-p. Prints the share
of equal rows per case. Needs the packed vLLM files on the path (docs/gpu-testing.md)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from vllm.v1.worker.gpu.sample.gumbel import apply_temperature, gumbel_sample
from vllm.v1.worker.gpu.sample.min_p import apply_min_p

from logits_gather import sampling


def vllm(logits, temp, seeds, pos, min_p=None):
    m = logits.shape[0]
    idx = torch.arange(m, dtype=torch.int32, device=logits.device)
    x = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    apply_temperature(x, idx, temp)
    if min_p is not None:
        apply_min_p(x, idx, min_p)
    return gumbel_sample(x, idx, temp, seeds, pos, apply_temperature=False, is_drafting=False)


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    v = 151552
    for dtype in (torch.bfloat16, torch.float32, torch.float16):
        for m in (1, 64, 256):
            x = (torch.randn(m, v, generator=gen, device=dev) * 4).to(dtype)
            before = x.clone()
            temp = torch.tensor([0.0, 1.0, 0.7, 1.3, 0.05, 2.0], device=dev)[torch.arange(m) % 6]
            seeds = torch.randint(-(2**62), 2**62, (m,), generator=gen, device=dev)
            pos = torch.randint(0, 2**20, (m,), generator=gen, device=dev)
            mp = torch.tensor([0.0, 0.05, 0.3], device=dev)[torch.arange(m) % 3]
            z = torch.zeros(m, device=dev)
            g = (sampling.greedy(x) == vllm(x, z, seeds, pos)).float().mean().item()
            t = (sampling.sample(x, temp, seeds, pos) == vllm(x, temp, seeds, pos)).float()
            p = sampling.sample(x, temp, seeds, pos, min_p=mp) == vllm(x, temp, seeds, pos, mp)
            assert torch.equal(x, before)
            print(f"{dtype} M={m}: greedy {g:.3f} temperature {t.mean().item():.3f} "
                  f"min_p {p.float().mean().item():.3f}", flush=True)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
