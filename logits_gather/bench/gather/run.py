"""The gather benchmark on one rank, from the run-wide probes to the report (rank 0
writes it): every vocabulary size in turn (``suite.py``), then the buffers kept to the
end are released on every rank at once."""

from __future__ import annotations

import gc
from typing import Any

from .. import machine
from ..progress import Progress
from ..report import preamble
from ..timing import make_clock
from . import limit
from .report import finish
from .side import WorldSizeOne, release_all
from .suite import bench_vocab


def run_gather(ctx: Any) -> None:
    cfg = ctx.cfg
    info = machine.describe(ctx) if ctx.rank == 0 else None
    if ctx.rank == 0:
        preamble(info, ctx)
    clock = make_clock(ctx)
    results = []
    with Progress(total=len(cfg.vocabs) * (len(cfg.rows) + 1) + 1, enabled=ctx.rank == 0) as bar:
        bar.label("limit probes")
        limits = limit.probes(ctx, clock)
        ws1 = WorldSizeOne(ctx) if ctx.cuda and cfg.host else None
        bar.step()
        probes = {"limits": limits, "ws1": ws1}
        for vocab in cfg.vocabs:
            results.append(bench_vocab(ctx, clock, vocab, bar, probes))
            gc.collect()
    ctx.beat("report")
    ctx.barrier()
    if ctx.rank == 0:
        finish(info, ctx, results)
    ctx.sync()
    ctx.barrier()
    timed = [
        n
        for res in results
        for n, st in res["methods"].items()
        if n != "limit" and st["status"] == "ok"
    ]
    if not timed:  # every rank raises: a run that timed nothing must not exit 0
        raise RuntimeError(
            "no method could be timed: "
            + "; ".join(
                f"{n} {st['status']}: {st.get('reason')}" for n, st in results[0]["methods"].items()
            )
        )
    ctx.barrier()
    release_all()  # every rank at once: no peer is still writing into what is freed
    ctx.sync()
    ctx.barrier()
