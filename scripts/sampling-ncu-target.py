"""Fused sampling calls for Nsight Compute, one GPU, one rank (no peers).

``python scripts/sampling-ncu-target.py [M]`` runs top_k=50, top_p=0.9 (round 1),
plain sampling and greedy over 75776 bf16 columns (the per-rank work of tp=2 at
V=151552), each twice unprofiled, then three times between ``cudaProfilerStart`` and
``cudaProfilerStop``. Profile one kernel's lines with, for example::

    PYTHONPATH=. ncu --clock-control none --profile-from-start off \\
        -k regex:nucleus_final --launch-count 1 --section SourceCounters \\
        --import-source yes --page source --print-source cuda,sass --csv \\
        python3 scripts/sampling-ncu-target.py 64 > lines.csv
    python scripts/ncu-lines.py lines.csv

(``--clock-control none``: leave the clocks as they are.)
"""

from __future__ import annotations

import sys

import torch

from tests.emulated import Ranks

COLUMNS = 75776


def main() -> None:
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    dev = torch.device("cuda")
    f = Ranks(1, COLUMNS, max(m, 1), dev, wait_ctas=0).fused[0]
    x = (torch.randn(m, COLUMNS, device=dev) * 3).to(torch.bfloat16)
    t = torch.full((m,), 0.8, device=dev)
    seed = torch.arange(m, device=dev)
    p90 = torch.full((m,), 0.9, dtype=torch.float64, device=dev)
    ops = [
        lambda: f.sample(x, t, seed, 50),
        lambda: f.topp_rounds(x, t, seed, p90, None),
        lambda: f.sample(x, t, seed, None),
        lambda: f.greedy(x),
    ]
    for op in ops:  # compiled and loaded before the profiled calls
        op()
        op()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for op in ops:
        for _ in range(3):
            op()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
