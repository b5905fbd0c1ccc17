"""Gather vocab-parallel logits on two ranks and check the result against torch.cat.

    python examples/quickstart.py

Runs anywhere: on two or more GPUs each rank takes its own GPU (NCCL, and the NVLink
kernel where the GPUs can map each other's memory); elsewhere the ranks run on the CPU
(gloo, the torch.distributed fallback).
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from logits_gather import LogitsGather, sampling


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    gpus = torch.cuda.device_count() >= world
    if gpus:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpus else "gloo", rank=rank, world_size=world)
    device = torch.device(f"cuda:{rank}" if gpus else "cpu")

    columns = 151552 // world  # V / tp: this rank's slice of the vocabulary
    gather = LogitsGather(columns, capacity=64, device=device, dtype=torch.float32)

    torch.manual_seed(rank)
    shard = torch.randn(8, columns, device=device)  # this rank's [M, V/tp] logits
    logits = gather(shard)  # [M, V] on every rank; valid until the call after next

    parts = [torch.empty_like(shard) for _ in range(world)]
    dist.all_gather(parts, shard)
    assert torch.equal(logits, torch.cat(parts, dim=1))

    # Or sample straight from the shards, without gathering [M, V]:
    temperature = torch.full((8,), 0.8, device=device)
    seed = torch.arange(8, device=device)
    tokens = sampling.sample(shard, temperature, seed, top_k=50, top_p=0.9)
    assert torch.equal(sampling.greedy(shard), logits.argmax(dim=1))
    if rank == 0:
        print("gathered", tuple(logits.shape), "on", device, "; tokens", tokens.tolist())

    del gather  # free library objects before the process group
    sampling.free_samplers()  # and the samplers the sampling functions cached
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
