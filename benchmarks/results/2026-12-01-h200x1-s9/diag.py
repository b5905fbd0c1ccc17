"""Session 9: why does the graph test's round-2 top-p call report need=True?
Scenarios, each with a fresh sampler (fresh mailboxes), 2 ranks on one GPU:
  spill:  graph of the spill call alone
  full:   the test's whole step, every top-p call's flags kept
  noif:   the whole step without IF nodes (fallback always, no round 2)
  eager:  the whole step eagerly, 7 times
Prints one line per replay per rank: flags of every top-p call."""

from __future__ import annotations

import os
import random
import sys
import time
import traceback

import torch

sys.path.insert(0, os.getcwd())
from tests.dist import run_ranks  # noqa: E402
from tests.gpu import (  # noqa: E402
    SPILL_TOP_P,
    adversarial_logits,
    delay_random_rank,
    spill_logits,
)

OUT = os.environ.get("OUT", "/tmp")


def _scenario(rank, world, seed, kind, log):
    import logits_gather.sampling as sampling
    from logits_gather.sampling import fused_filters, reference

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    n, m = 4099, 37
    v = n * world
    sampler = sampling.VocabParallelSampler(
        n, 64, device=dev, backend="symm_mem", check_values=False
    )
    if kind == "noif":
        sampler._topp_if = False
    rec = []
    orig = fused_filters.topp_rounds

    def rounds(fused, *a):
        out, flags, second = orig(fused, *a)
        rec.append((flags, fused.spilled))
        return out, flags, second

    sampler._fused.topp_rounds = lambda *a: rounds(sampler._fused, *a)
    shard = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    temp = torch.empty(m, device=dev)
    seeds = torch.empty(m, dtype=torch.int64, device=dev)
    ids = torch.empty(m, dtype=torch.int64, device=dev)
    top_k = torch.empty(m, dtype=torch.int64, device=dev)
    top_p = torch.empty(m, device=dev)
    min_p = torch.empty(m, device=dev)
    ones = torch.ones(m, device=dev)
    spill = spill_logits(m, n, world, torch.bfloat16, dev)
    spilled = spill[:, rank * n : (rank + 1) * n].contiguous()

    def fill(i):
        full = adversarial_logits(seed + i, m, n, world, torch.bfloat16, dev)
        gen = torch.Generator(device=dev).manual_seed(seed + 1000 + i)
        shard.copy_(full[:, rank * n : (rank + 1) * n])
        u = torch.rand(m, device=dev, generator=gen)
        temp.copy_(torch.where(u < 0.2, 0.0, u * 2))
        seeds.copy_(torch.randint(-(2**62), 2**62, (m,), device=dev, generator=gen))
        ids.copy_(torch.randint(0, v, (m,), device=dev, generator=gen))
        top_k.copy_(torch.randint(0, 80, (m,), device=dev, generator=gen))
        top_p.copy_(torch.rand(m, device=dev, generator=gen).clamp_(min=0.05))
        min_p.copy_(torch.rand(m, device=dev, generator=gen) * 0.2)
        return full

    def step():
        if kind == "spill":
            return (sampler.sample(spilled, ones, seeds, top_p=SPILL_TOP_P),)
        return (
            sampler.greedy(shard),
            sampler.sample(shard, temp, seeds),
            sampler.sample(shard, temp, seeds, top_k=20),
            sampler.sample(shard, temp, seeds, top_k=top_k, top_p=top_p, min_p=min_p),
            sampler.sample(shard, temp, seeds, top_p=0.9),
            sampler.sample(shard, temp, seeds, min_p=min_p),
            sampler.logprobs(shard, ids, 5),
            sampler.sample(shard, temp, seeds, top_p=top_p, min_p=min_p),
            sampler.sample(shard, temp, seeds, top_k=40, top_p=top_p, min_p=min_p),
            sampler.sample(spilled, ones, seeds, top_p=SPILL_TOP_P),
        )

    fill(0)
    step()
    step()
    torch.cuda.synchronize()
    sampler.check()
    rec.clear()
    if kind != "eager":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        calls = list(rec)
    rng = random.Random(seed)
    bad = 0
    for i in range(1, 8):
        full = fill(i)
        delay_random_rank(rng, rank, world)
        t0 = time.perf_counter()
        if kind == "eager":
            rec.clear()
            out = step()
            calls = list(rec)
        else:
            graph.replay()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        err = ""
        try:
            sampler.check()
        except Exception as exc:  # noqa: BLE001
            err = f" CHECK: {exc}"
        flags = [tuple(int(b) for b in f.tolist()) for f, _ in calls]
        lam = sorted(set(calls[-1][1].tolist()))
        want = reference.sample(spill, ones, seeds, top_p=SPILL_TOP_P)
        ok = torch.equal(out[-1], want)
        extra = ""
        if kind != "spill":
            ok_g = torch.equal(out[0], full.argmax(1))
            extra = f" greedy_ok={ok_g}"
        if not ok or flags[-1] != (0, 1) or err:
            bad += 1
        log(
            f"{kind} rank {rank} replay {i} {dt * 1e3:.1f} ms flags {flags} lam {lam} "
            f"spill_ok={ok}{extra}{err}"
        )
    torch.cuda.synchronize()
    return bad


def _main(rank, world, seed, kinds):
    path = os.path.join(OUT, f"diag_rank{rank}.txt")
    f = open(path, "a")

    def log(s):
        f.write(s + "\n")
        f.flush()

    res = {}
    for kind in kinds:
        t0 = time.perf_counter()
        try:
            res[kind] = _scenario(rank, world, seed, kind, log)
        except Exception:  # noqa: BLE001
            res[kind] = "error"
            log(f"{kind} rank {rank} ERROR\n{traceback.format_exc()}")
        log(f"== {kind} rank {rank} done in {time.perf_counter() - t0:.1f} s: {res[kind]}")
    return res


if __name__ == "__main__":
    kinds = sys.argv[1].split(",")
    env = {
        "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1",
        "LOGITS_GATHER_SAMPLING_FUSED": "1",
        "LOGITS_GATHER_SAMPLING_FUSED_TOPK": "1",
    }
    seed = random.randrange(2**31)
    print("seed", seed, flush=True)
    try:
        print(run_ranks(_main, 2, seed, kinds, env=env, timeout=float(sys.argv[2])))
    except AssertionError as exc:
        print(exc)
