"""min-p's threshold in the fused kernels against the definition's, over every fp32 in
[0, 1] and -0.0, on one GPU.

``PYTHONPATH=. python scripts/min-p-log-check.py`` takes libdevice's ``log`` in a Triton
kernel, as the min-p kernels take ``log(min_p)`` (:func:`.elementwise.log_kernel`), and
compares its bits with ``torch.log``'s (what :mod:`.reference` uses) on the same GPU,
counting normal and subnormal inputs apart (a libdevice that flushed subnormals to zero
would give ``-inf`` there). Exit status 1 if any value differs.
"""

from __future__ import annotations

import sys

import torch
import triton

from logits_gather.sampling.elementwise import log_kernel

BLOCK = 1024
CHUNK = 1 << 26
ONE = 0x3F800000  # 1.0f
LEAST_NORMAL = 0x00800000


def main() -> int:
    dev = torch.device("cuda")
    normal_diff = sub_diff = sub_flushed = total = 0
    first = None
    for lo in range(0, ONE + 1, CHUNK):
        bits = torch.arange(lo, min(lo + CHUNK, ONE + 1), dtype=torch.int32, device=dev)
        if lo == 0:
            bits = torch.cat([torch.tensor([-(2**31)], dtype=torch.int32, device=dev), bits])
        x = bits.view(torch.float32)
        ours = torch.empty_like(x)
        log_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, ours, x.numel(), BLOCK=BLOCK)
        want = torch.log(x)
        bad = (ours.view(torch.int32) != want.view(torch.int32)) & ~(ours.isnan() & want.isnan())
        if first is None and bool(bad.any()):
            j = int(bad.nonzero()[0, 0])
            first = (hex(int(bits[j]) & 0xFFFFFFFF), float(ours[j]), float(want[j]))
        sub = bits < LEAST_NORMAL  # 0 and -0.0 too
        normal_diff += int((bad & ~sub).sum())
        sub_diff += int((bad & sub).sum())
        sub_flushed += int((sub & (bits > 0) & torch.isneginf(ours)).sum())
        total += x.numel()
    print(f"values checked: {total} (every fp32 bit pattern 0x0..0x3f800000, and -0.0)")
    print(f"libdevice log != torch.log: {normal_diff} normal, {sub_diff} subnormal or zero"
          + (f"; first {first}" if first else ""))  # fmt: skip
    print(f"subnormal inputs whose libdevice log is -inf (flushed): {sub_flushed}")
    return 1 if normal_diff or sub_diff else 0


if __name__ == "__main__":
    sys.exit(main())
