"""Harness: the fused head kernel in Triton's interpreter (run by tests/head/test_interpreter.py
with TRITON_INTERPRET=1). World size 1, and world size 2 with the peer's arrival preset
(interpreted programs run one after another, so no rank can wait for a live peer).
Small integer inputs make every sum exact, so every element is checked bit for bit
against torch; rows past M and the other rank's column block must stay poisoned."""

from __future__ import annotations

import random

import torch
import triton.runtime.interpreter as interpreter

from logits_gather.head.kernel import head_kernel

_patch_tensor = interpreter._patch_lang_tensor


def _patch_lang_tensor(tensor, scope) -> None:
    """Triton 3.6's interpreter holds scalar arguments as 1-element arrays and converts
    them with ``int(array)``, which numpy >= 2.4 refuses: convert through ``.item()``."""
    _patch_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


interpreter._patch_lang_tensor = _patch_lang_tensor

POISON = -7.0


def run(world: int, m: int, h: int, n: int, tile: tuple, dtype: torch.dtype, seed: int) -> str:
    bm, bn, bk, warps, stages = tile
    gen = torch.Generator().manual_seed(seed)
    # |sums| <= 2 * 2 * h: exact in fp32 and fp16, whatever the rounding mode
    x = torch.randint(-2, 3, (m, h), generator=gen).to(dtype)
    w = torch.randint(-2, 3, (n, h), generator=gen).to(dtype)
    capacity, rank = m + 2, world - 1
    slots = [torch.full((capacity, world * n), POISON, dtype=dtype) for _ in range(world)]
    flags = torch.zeros(4, 8, dtype=torch.int32)  # ARRIVE, READY, CALLS, GCALLS per CTA
    flags[0] = 1  # the peer has arrived (world 2)
    flags[1] = 1
    peer_flags = torch.tensor([flags.data_ptr()] * world, dtype=torch.int64)
    status = torch.zeros(4, dtype=torch.int32)
    dsts = slots + [slots[0]] * (8 - world)
    grid = min(8, -(-n // bn) * -(-m // bm))
    head_kernel[(grid,)](
        x, w, *dsts, flags, peer_flags, status, m, n, h, 10**6,
        RANK=rank, WORLD=world, MAXC=8, BM=bm, BN=bn, BK=bk, STAGES=stages,
        GRAPH=world > 1, NUM_THREADS=warps * 32, TRAP=False,
    )  # fmt: skip
    want = (x.float() @ w.float().T).to(dtype)
    errors = []
    for r, s in enumerate(slots):
        block = s[:m, rank * n : (rank + 1) * n]
        if not torch.equal(block.view(torch.int16), want.view(torch.int16)):
            errors.append(f"rank {r}'s copy differs in {(block != want).sum()} elements")
        rest = torch.cat([s[m:].flatten(), s[:m, : rank * n].flatten()])
        if not (rest == POISON).all():
            errors.append(f"rank {r}: {(rest != POISON).sum()} elements outside the tile written")
    if world > 1:
        if flags[2, :grid].tolist() != [1] * grid or flags[3, :grid].tolist() != [1] * grid:
            errors.append(f"call counters {flags[2:, :grid].tolist()}")
        if flags[0, :grid].tolist() != [1 + world] * grid:
            errors.append(f"arrivals {flags[0, :grid].tolist()}")
    if status[0]:
        errors.append(f"status {status.tolist()}")
    return "; ".join(errors)


def main() -> None:
    rng = random.Random(5)
    failures = 0
    cases = [
        (1, 1, 64, 64, (16, 32, 32, 4, 2)),
        (1, 5, 96, 80, (16, 64, 32, 4, 2)),
        (2, 3, 64, 48, (16, 32, 64, 4, 2)),
        (2, 17, 32, 96, (16, 32, 16, 4, 3)),
        (2, 40, 64, 64, (32, 32, 32, 4, 2)),
    ]
    for world, m, h, n, tile in cases:
        dtype = torch.float16  # the interpreter's bf16 dot gives garbage (numpy has no bf16)
        why = run(world, m, h, n, tile, dtype, rng.randrange(10**6))
        print(f"world={world} m={m} h={h} n={n} tile={tile} {dtype}: {why or 'ok'}")
        failures += bool(why)
    print(f"FAILURES: {failures}")


if __name__ == "__main__":
    main()
