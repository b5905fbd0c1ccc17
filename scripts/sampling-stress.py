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

from logits_gather.sampling import geometry
from tests.emulated import Ranks
from tests.test_sampling_emulated_gpu import V, calls

NAMES = ("top_n=20", "top_k=1", "top_k=2", "top_k=3")


def _same(name: str, out, want) -> bool:
    if name.startswith("top_n"):  # the ids: the values are within a tolerance
        return torch.equal(out[1], want.top_ids)
    return torch.equal(out, want)


def main() -> None:
    p = argparse.ArgumentParser(prog="python scripts/sampling-stress.py")
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--seconds", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--replicated", action="store_true", help="the old waiting-kernel warps")
    args = p.parse_args()
    if args.replicated:
        geometry._warps = lambda elements, most: most
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ranks = Ranks(args.world, V // args.world, 64, dev)
    rng = random.Random(args.seed)
    for dtype in (torch.bfloat16, torch.float32):
        for name, call, _ in calls(ranks, rng, 5, dtype):
            if name in NAMES:
                ranks.warm(call)
    counts, wrong = collections.Counter(), collections.Counter()
    start, it = time.monotonic(), 0
    while time.monotonic() - start < args.seconds:
        it += 1
        dtype = torch.float32 if it % 2 else torch.bfloat16
        for name, call, want in calls(ranks, rng, rng.randint(1, 64), dtype):
            if name not in NAMES:
                continue
            outs = ranks.run(call, (rng.randrange(args.world), rng.randrange(0, 200_000)))
            counts[name] += 1
            bad = [r for r, o in enumerate(outs) if not _same(name, o, want)]
            if bad:
                wrong[name] += 1
                print(f"iteration {it} {dtype} {name}: wrong on ranks {bad}; "
                      f"mailbox copies {ranks.diverged() or 'equal'}")  # fmt: skip
    print(f"world={args.world} replicated={args.replicated} iterations={it}: "
          f"calls {dict(counts)}, wrong {dict(wrong)}")  # fmt: skip


if __name__ == "__main__":
    main()
