"""Profile of shapes that ``head/table.py`` routes to cuBLAS: the fused head kernel vs cuBLAS.

World size 1 (no peers, no barrier: the kernel is the plain GEMM into a local slot), bf16,
by default H=5120 and columns=75776 (tp 2 of 151552) at M=256 (routed to cuBLAS) and
M=16 (fused, for contrast). For each M it checks every candidate tile of
``scripts/head-sweep.py`` against an fp32 reference, then either times cuBLAS and each
tile (``--time``: CUDA events around bursts, as the sweep does) or runs each once between
``cudaProfilerStart``/``Stop`` for Nsight Compute (``--ncu``), in this order: cuBLAS
``F.linear``, then the tiles as printed.

    PYTHONPATH=. python scripts/head-profile.py --time
    PYTHONPATH=. ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats --csv --page details \\
        python scripts/head-profile.py --ncu
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from logits_gather.head.fused import FusedHead, LocalSlots

log = logging.getLogger("head-profile")


def _sweep():
    """``scripts/head-sweep.py`` as a module (its candidates, timer and error measure)."""
    spec = importlib.util.spec_from_file_location(
        "head_sweep", Path(__file__).with_name("head-sweep.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="256,16", help="M values, comma-separated")
    p.add_argument("--hidden", type=int, default=5120)
    p.add_argument("--columns", type=int, default=75776)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--time", action="store_true")
    mode.add_argument("--ncu", action="store_true")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sweep = _sweep()
    dev, dtype, h, columns = torch.device("cuda", 0), torch.bfloat16, a.hidden, a.columns
    rows = [int(m) for m in a.rows.split(",")]
    gen = torch.Generator(device=dev).manual_seed(h + columns)
    weight = (torch.randn(columns, h, device=dev, generator=gen) * 0.02).to(dtype)
    slots = LocalSlots(max(rows), columns, dtype, dev)
    head = FusedHead(slots, capacity=max(rows), dtype=dtype, device=dev, graphs=False, agree=list)
    gbytes = weight.numel() * weight.element_size() / 1e9
    for m in rows:
        hidden = torch.randn(m, h, device=dev, generator=gen).to(dtype)
        ref = hidden.float() @ weight.float().T
        cublas_err = sweep.rel(F.linear(hidden, weight), ref)
        calls = {"cublas F.linear": partial(F.linear, hidden, weight)}
        for tile in sweep.CANDIDATES[m]:
            tile = tile.fit(h)
            head.compile(h, tile)
            err = sweep.rel(head(hidden, weight, tile), ref)
            if not err <= max(2 * cublas_err, 1e-3):
                raise SystemExit(
                    f"M={m} {tile}: relative error {err:.2e} (cuBLAS {cublas_err:.2e})"
                )
            grid = tile.grid(m, columns, slots.ctas)
            calls[f"fused {tile} grid {grid}"] = partial(head, hidden, weight, tile)
        for fn in calls.values():  # warm up: compilation and handles stay out
            fn()
        torch.cuda.synchronize()
        if a.ncu:
            torch.cuda.profiler.start()
            for name, fn in calls.items():
                log.info("M=%d H=%d columns=%d: profiled %s", m, h, columns, name)
                fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        for name, fn in calls.items():
            us = sweep.burst_us(fn, 20, 7)
            log.info(
                "M=%3d H=%d columns=%d  %-60s %7.1f us  %.2f TB/s of weight",
                m,
                h,
                columns,
                name,
                us,
                gbytes / us * 1e3,
            )


if __name__ == "__main__":
    main()
