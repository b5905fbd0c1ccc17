"""Probe: host cost per eager call (µs) of LogitsGather, its backend alone, a torch op and an NCCL
all-gather at world size 1, on 2 colocated ranks. Run with an MPS daemon up; bursts stay
short of the launch queue so the device never throttles the host."""

import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.dist import run_ranks  # noqa: E402


def _time(fn, reps=9, burst=300):
    for _ in range(20):
        fn()
    runs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(burst):
            fn()
        runs.append((time.perf_counter() - t) / burst * 1e6)
    torch.cuda.synchronize()
    return round(sorted(runs)[reps // 2], 2)


def _probe(rank, world):
    torch.cuda.set_device(0)
    from logits_gather import LogitsGather

    g = LogitsGather(columns=18944, capacity=64, device=torch.device("cuda", 0))
    solo = [dist.new_group([r], backend="nccl") for r in range(world)][rank]
    x = torch.randn(4, 18944, device="cuda").to(torch.bfloat16)
    y = torch.randn(4, 18944, device="cuda").to(torch.bfloat16)
    out = torch.empty(4, 18944, device="cuda", dtype=torch.bfloat16)
    dist.all_gather_into_tensor(out, x, group=solo)
    impl = g._impl
    return {
        "ours": _time(lambda: g(x)),
        "impl_only": _time(lambda: impl(x)),
        "add_": _time(lambda: y.add_(1)),
        "nccl_allgather_w1": _time(lambda: dist.all_gather_into_tensor(out, x, group=solo)),
    }


if __name__ == "__main__":
    for r in run_ranks(
        _probe, 2, env={"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}, timeout=300
    ):
        print(r)
