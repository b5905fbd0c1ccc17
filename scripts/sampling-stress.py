"""Counts wrong results of the fused sampling kernels, ranks emulated in one process (GPU).

``CUDA_MODULE_LOADING=EAGER PYTHONPATH=. python scripts/sampling-stress.py --world 4
--seconds 100 [--replicated]`` draws fresh adversarial batches (tests.emulated and the
emulated test's rows) and delays a random rank per call, for ``--seconds``, and prints
how many calls of each operation returned a wrong token on any rank. ``--replicated``
gives the radix-select waiting kernels their old warps (8 for the top-k final, 4 for
the reduce), which replicate top_k <= 2's 128 candidates across threads: the A/B of
benchmarks/NOTES.md (session 3).
"""

from __future__ import annotations

import argparse
import collections
import random
import time

import torch

from logits_gather.sampling import fused, reference
from tests.emulated import Ranks
from tests.test_sampling_emulated_gpu import _full

V = 151552


def _calls(rng: random.Random, ranks: Ranks, m: int, dtype: torch.dtype) -> list:
    n, dev = ranks.columns, ranks.device
    full = _full(rng, m, n, ranks.world, dtype, dev)
    shards = [full[:, r * n : (r + 1) * n] for r in range(ranks.world)]
    temp = torch.tensor([rng.choice([0.0, 0.3, 0.8, 1.0, 1.7]) for _ in range(m)], device=dev)
    seed = torch.randint(-(2**63), 2**63 - 1, (m,), device=dev)
    ids = torch.randint(0, V, (m,), device=dev)
    calls = [
        ("top_n=20", lambda f, r: f.logprobs(shards[r], ids, 20)[1],
         reference.logprobs(full, ids, 20).top_ids),
    ]  # fmt: skip
    for k in (1, 2, 3):
        calls.append(
            (f"top_k={k}", lambda f, r, k=k: f.sample(shards[r], temp, seed, k),
             reference.sample(full, temp, seed, top_k=k))
        )  # fmt: skip
    return calls


def main() -> None:
    p = argparse.ArgumentParser(prog="python scripts/sampling-stress.py")
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--seconds", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--replicated", action="store_true", help="the old waiting-kernel warps")
    args = p.parse_args()
    if args.replicated:
        fused._warps = lambda elements, most: most
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ranks = Ranks(args.world, V // args.world, 64, dev)
    rng = random.Random(args.seed)
    for dtype in (torch.bfloat16, torch.float32):
        for _, call, _ in _calls(rng, ranks, 5, dtype):
            ranks.warm(call)
    calls, wrong = collections.Counter(), collections.Counter()
    start, it = time.monotonic(), 0
    while time.monotonic() - start < args.seconds:
        it += 1
        dtype = torch.float32 if it % 2 else torch.bfloat16
        for name, call, want in _calls(rng, ranks, rng.randint(1, 64), dtype):
            outs = ranks.run(call, (rng.randrange(args.world), rng.randrange(0, 200_000)))
            calls[name] += 1
            bad = [r for r, o in enumerate(outs) if not torch.equal(o, want)]
            if bad:
                wrong[name] += 1
                print(f"iteration {it} {dtype} {name}: wrong on ranks {bad}; "
                      f"mailbox copies {ranks.diverged() or 'equal'}")  # fmt: skip
    print(f"world={args.world} replicated={args.replicated} iterations={it}: "
          f"calls {dict(calls)}, wrong {dict(wrong)}")  # fmt: skip


if __name__ == "__main__":
    main()
