"""The gather benchmark's report: method lines, the device and host tables, the targets
(rank 0), on the shared parts in ``bench/report.py``."""

from __future__ import annotations

import os
from typing import Any

from ..cli import TIMED
from ..report import cell, mode_lines, num, table, write
from . import targets
from .figure import plot

CLIP_NOTE = (
    "* ours measured faster than the limit; clipped at 100% (the raw value is in the "
    "JSON as pct_of_limit_raw): the ceiling was measured low"
)


def _method_lines(res: dict[str, Any]) -> list[str]:
    lines = ["methods:"]
    for name, st in res["methods"].items():
        if st["status"] == "ok" and name != "limit":
            lines.append(f"  {name:<12} ok ({st.get('detail', '')})")
        elif name != "limit":
            lines.append(f"  {name:<12} {st['status']}: {st['reason']}")
    lim = res["limit"]
    if "limit" in res["methods"]:
        cands = ", ".join(f"{k} {num(v)}" for k, v in lim["candidates_gbps"].items())
        bar, push = lim["barrier"], lim["push"]
        bar_text = (
            f"{num(bar['us'])} µs ({bar['source']})"
            if bar["status"] == "ok"
            else f"unavailable: {bar['reason']}"
        )
        bw = (
            f"{num(lim['gbps'])} GB/s ({lim['bandwidth_source']})"
            if "gbps" in lim
            else "unavailable"
        )
        extra = "; ".join(f"{k}: {v}" for k, v in push.get("problems", {}).items())
        if push["status"] != "ok":
            extra = push["reason"]
        lines.append(
            f"  {'limit':<12} floor + egress / bandwidth: "
            + ("n/a, " + lim["reason"] if lim["status"] != "ok" else "ok")
        )
        lines.append(
            f"  {'':<12} bandwidth {bw}; candidates GB/s: {cands or 'none'}"
            + (f" (push probe: {extra})" if extra else "")
        )
        lines.append(f"  {'':<12} floor {bar_text}")
    lines.append(f"NCCL symmetric kernels: {res['nccl_kernels'].get('symmetric')}")
    return lines


def _pct(row: dict[str, Any]) -> str:
    pct = row.get("pct_of_limit")
    if pct is None:
        return "n/a"
    return f"{pct:.0f}%" + ("*" if row.get("pct_clipped") else "")


def device_table(res: dict[str, Any], cuda: bool = True, mode: str = "nccl") -> list[str]:
    timed = [n for n in TIMED if n in res["methods"]]
    head = ["M", *timed, "limit", "ours GB/s", "ours/stock", "% of limit"]
    rows = []
    for row in res["rows"]:
        sp = row["ours_over_stock"]
        rows.append(
            [
                str(row["m"]),
                *(cell(row["device_us"].get(n), res["methods"].get(n)) for n in timed),
                num(row["limit_us"]),
                num(row["ours_gbps"]),
                f"{sp:.2f}" if sp else "n/a",
                _pct(row),
            ]
        )
    label = "" if mode in ("nccl", "cpu") else "LATENCY ONLY (ranks share GPUs): "
    lines = [
        f"{label}V={res['vocab']} {res['dtype']} ({res['columns_per_rank']} columns per "
        f"rank): {'device' if cuda else 'wall-clock'} µs per call (median of bursts, max "
        "over ranks; ± spread of two passes)",
        *table(head, rows),
    ]
    if any(r.get("pct_clipped") for r in res["rows"]):
        lines.append(CLIP_NOTE)
    if res["limit"].get("status") != "ok":
        lines.append(f"limit and % of limit n/a: {res['limit'].get('reason')}")
    return lines


def host_table(res: dict[str, Any]) -> list[str]:
    cols = [
        ("ours", "ours host"),
        ("stock", "stock host"),
        ("nccl_ag_ws1", "NCCL ag ws1 host"),
        ("stock_ws1", "stock ws1 host"),
    ]
    if "ours_checked" in res["methods"]:
        cols.insert(1, ("ours_checked", "ours_checked host"))
    head = [
        "M",
        *(t for _, t in cols),
        "ours graph",
        "ours graph/eager",
        "stock graph",
        "stock graph/eager",
    ]
    rows = []
    for row in res["rows"]:
        cells = [str(row["m"]), *(cell(row["host_us"].get(k)) for k, _ in cols)]
        for n in ("ours", "stock"):
            g = row["graph_us"].get(n)
            ok = g is not None and g.get("status") == "ok"
            cells += [cell(g), f"{g['vs_eager']:.2f}x" if ok and g["vs_eager"] else "n/a"]
        rows.append(cells)
    lines = [
        "host µs per eager call (ws1: at world size 1, NCCL on a 1-rank subgroup) and "
        "CUDA-graph replay µs per call",
        *table(head, rows),
    ]
    for row in res["rows"]:
        for n, g in row["graph_us"].items():
            if g.get("status") != "ok":
                lines.append(f"  M={row['m']} {n} graph {g['status']}: {g.get('reason')}")
    return lines


def check_cost_lines(res: dict[str, Any], cuda: bool) -> list[str]:
    """What check_calls=True costs per call: ours_checked minus ours, per M."""
    if res["methods"].get("ours_checked", {}).get("status") != "ok":
        return []
    parts = []
    for row in res["rows"]:
        dev = [row["device_us"].get(n, {}).get("median") for n in ("ours", "ours_checked")]
        host = [row["host_us"].get(n, {}).get("median") for n in ("ours", "ours_checked")]
        text = f"M={row['m']}: {'device' if cuda else 'wall-clock'} {_delta(dev)}"
        if None not in host:
            text += f", host {_delta(host)}"
        parts.append(text)
    return ["check_calls cost (ours_checked - ours, µs per call): " + "; ".join(parts)]


def _delta(pair: list[float | None]) -> str:
    if None in pair:
        return "n/a"
    return f"{pair[1] - pair[0]:+.2f}"


def stem(ctx: Any, info: dict[str, Any]) -> str:
    """File names carry tp, placement, dtype and every V: runs never overwrite each other."""
    cfg = ctx.cfg
    vocabs = "-".join(map(str, cfg.vocabs))
    return os.path.join(cfg.out, f"bench_tp{ctx.world}_{info['placement']}_{cfg.dtype}_V{vocabs}")


def finish(info: dict[str, Any], ctx: Any, results: list[dict[str, Any]]) -> None:
    notes = mode_lines(info)
    text: list[str] = []
    for res in results:
        res["targets"] = {"host": targets.host(res), "device": targets.device(res)}
        lines = [*_method_lines(res), "", *device_table(res, ctx.cuda, info["mode"])]
        if ctx.cuda and (ctx.cfg.host or ctx.cfg.graphs):
            lines += ["", *host_table(res)]
        elif not ctx.cuda:
            lines += ["", "host cost and CUDA-graph timing skipped: they need CUDA"]
        lines += check_cost_lines(res, ctx.cuda)
        lines += ["", *targets.lines(res, info["mode"])]
        text += lines + [""]
        print("\n".join(lines) + "\n")
    for line in notes:
        print(line)
    base = stem(ctx, info)
    write(base, "logits_gather.bench", info, ctx, ctx.cfg, notes, results, text, plot)
