"""The limit: what a gather of ``M`` rows could cost at best on this machine, and how
close ours comes.

``limit(M) = floor + egress(M) / bandwidth`` with ``egress(M) = (tp-1) * M * V/tp *
bytes`` per rank.

* ``floor``: the independent barrier probe (``barrier_probe.py``), under graph replay.
* ``bandwidth``: the best of the push probes (``push_probe.py``: ``copy_`` and Triton
  16-byte stores into every peer) and ours at its best M with the floor taken off
  (so the floor is not counted twice). A ceiling taken from ours alone would
  flatter ours; one from the probes alone could sit below what ours reaches.

``% of limit = 100 * limit(M) / ours(M)``. It is clipped at 100 (ours cannot beat
the ceiling; a higher raw value means the ceiling was measured low, and the raw
value is kept in the JSON as ``pct_of_limit_raw``; the table marks it ``100%*``).
The limit means something only with one rank per GPU on CUDA: on CPU (gloo) and
when ranks share GPUs it is n/a, and the table prints n/a.
"""

from __future__ import annotations

from typing import Any

from ..plan import LATENCY_ONLY


def probes(ctx: Any, clock: Any) -> dict[str, Any]:
    """The run-wide probes (they do not depend on V). Collective."""
    from . import side
    from .barrier_probe import barrier_latency
    from .push_probe import push_bandwidth

    if "limit" not in ctx.cfg.methods:
        off = {"status": "unavailable", "reason": "--methods excludes limit"}
        return {"push": off, "barrier": off}
    if not ctx.cuda:
        off = {"status": "unavailable", "reason": "CPU run: no GPU ceiling to measure"}
        return {"push": off, "barrier": off}
    ctx.beat("limit: barrier probe")
    barrier = barrier_latency(ctx, clock, side.KEPT)
    push = {"status": "unavailable", "reason": "ranks share GPUs: peer bandwidth is shared"}
    if not ctx.plan.shared:
        ctx.beat("limit: push probes")
        push = push_bandwidth(ctx, clock, side.KEPT)
    return {"push": push, "barrier": barrier}


def why_not(plan: Any, cfg: Any) -> str | None:
    """Why the limit means nothing in this run, or None."""
    if "limit" not in cfg.methods:
        return "--methods excludes limit"
    if plan.mode == "cpu":
        return "CPU run (gloo): the limit is a GPU ceiling"
    if plan.shared:
        return LATENCY_ONLY.format(tp=plan.tp)
    return None


def derive(rows: list[dict], found: dict[str, Any], plan: Any, cfg: Any) -> dict[str, Any]:
    """Fills each row's ``limit_us``, ``pct_of_limit`` (clipped), ``pct_of_limit_raw``
    and ``pct_clipped``; returns the run's limit entry."""
    push, barrier = found["push"], found["barrier"]
    limit: dict[str, Any] = {
        "push": push,
        "barrier": barrier,
        "candidates_gbps": {},
        "definition": "floor + egress / bandwidth (see limit.py)",
    }
    reason = why_not(plan, cfg) or (
        None if barrier.get("status") == "ok" else f"barrier probe: {barrier.get('reason')}"
    )
    floor = barrier["us"] if barrier.get("status") == "ok" else None
    if push.get("status") == "ok":
        limit["candidates_gbps"].update(push["candidates_gbps"])
    ours_bw = {
        r["m"]: r["egress_bytes"] / (r["device_us"]["ours"]["median"] - floor) / 1e3
        for r in rows
        if floor is not None
        and "ours" in r["device_us"]
        and r["device_us"]["ours"]["median"] > 2 * floor
    }
    if ours_bw:
        best_m = max(ours_bw, key=ours_bw.get)
        limit["candidates_gbps"][f"ours at M={best_m}"] = ours_bw[best_m]
    cands = limit["candidates_gbps"]
    if cands:
        best = max(cands, key=cands.get)
        limit.update(gbps=cands[best], bandwidth_source=best)
    elif not reason:
        reason = f"no bandwidth: {push.get('reason')}"
    limit["status"] = "n/a" if reason else "ok"
    limit["reason"] = reason
    for row in rows:
        dev = row["device_us"]
        ours, stock = dev.get("ours", {}).get("median"), dev.get("stock", {}).get("median")
        row["ours_gbps"] = row["egress_bytes"] / ours / 1e3 if ours else None
        row["ours_over_stock"] = ours / stock if ours and stock else None
        row["limit_us"] = row["pct_of_limit"] = row["pct_of_limit_raw"] = None
        row["pct_clipped"] = False
        if reason is None:
            row["limit_us"] = floor + row["egress_bytes"] / limit["gbps"] / 1e3
            if ours:
                raw = 100 * row["limit_us"] / ours
                row.update(
                    pct_of_limit=min(raw, 100.0), pct_of_limit_raw=raw, pct_clipped=raw > 100.0
                )
    return limit
