"""The sampling benchmark's report: tables, targets, JSON and PNG, from every rank's
measurements (median of bursts per rank, then the max over ranks: ``summarize`` in
``bench/timing.py``).

Ratios are ours / peer: below 1 means ours is faster; lower is better everywhere."""

from __future__ import annotations

import json
import os
from typing import Any

from ..plot import SKIPPED, pyplot, save
from ..timing import summarize
from .peers import OPS

PEERS = ("vllm", "torch")
# Against vLLM's own kernels, graph replay at every M (eager: EAGER_TARGET for every op).
GRAPH_TARGETS = {
    "greedy": 0.60,
    "sample": 0.45,
    "min_p": 0.35,
    "top_k": 0.25,
    "top_p": 0.40,
    "top_k_top_p": 0.30,
}
EAGER_TARGET = 0.6


def combine(everyone: list[dict[str, Any]], rows: list[int], mode: str) -> dict:
    """{m: {op: {method: summary}}} for ``mode`` ("eager" or "graph")."""
    out: dict = {}
    for m in rows:
        keys = everyone[0][mode].get(m, {})
        for op, meth in keys:
            passes = [r[mode][m][op, meth] for r in everyone]
            out.setdefault(m, {}).setdefault(op, {})[meth] = summarize(passes)
    return out


def _table(title: str, cells: dict, rows: list[int], methods: list[str]) -> list[str]:
    peers = [p for p in PEERS if p in methods]
    head = f"{'op':<12}{'M':>5}" + "".join(f"{m + ' us':>13}" for m in methods)
    head += "".join(f"{'ours/' + p:>12}" for p in peers)
    lines = [
        title,
        "ratio columns are ours / peer: lower is better, below 1 means ours is faster",
        head,
    ]
    for op in OPS:
        for m in rows:
            t = {meth: cells.get(m, {}).get(op, {}).get(meth) for meth in methods}
            line = f"{op:<12}{m:>5}"
            for meth in methods:
                v = t[meth]
                line += (
                    f"{v['median']:>9.1f} ±{v['spread_pct'] or 0:>2.0f}%" if v else f"{'n/a':>13}"
                )
            for p in peers:
                ok = t["ours"] and t[p]
                line += f"{t['ours']['median'] / t[p]['median']:>12.2f}" if ok else f"{'n/a':>12}"
            lines.append(line)
    return lines


def ratio(cells: dict, m: int, op: str, peer: str) -> float | None:
    t = cells.get(m, {}).get(op, {})
    if "ours" in t and peer in t:
        return t["ours"]["median"] / t[peer]["median"]
    return None


def targets(eager: dict, graph: dict, rows: list[int], setup_ok: str) -> list[dict]:
    """Every target against vLLM's kernels: met, MISSED or not measured (why)."""
    out = []
    for mode, cells, bound_of in (
        ("graph replay", graph, GRAPH_TARGETS.get),
        ("eager", eager, lambda op: EAGER_TARGET),
    ):
        for op in OPS:
            bound = bound_of(op)
            got = {m: ratio(cells, m, op, "vllm") for m in rows}
            have = {m: r for m, r in got.items() if r is not None}
            entry = {"target": f"{mode} {op}: ours/vllm <= {bound} at every M", "bound": bound}
            if len(have) < len(rows):
                miss = [m for m in rows if got[m] is None]
                entry.update(status="not measured", why=f"no ours and vllm figure at M={miss}")
            else:
                worst = max(have, key=have.get)
                entry.update(
                    status="met" if have[worst] <= bound else "MISSED",
                    worst=have[worst],
                    worst_m=worst,
                )
            if setup_ok:
                entry["note"] = setup_ok
            out.append(entry)
    return out


def _target_line(t: dict) -> str:
    if t["status"] == "not measured":
        return f"{t['target']}: not measured ({t['why']})"
    note = f" ({t['note']})" if "note" in t else ""
    return f"{t['target']}: worst {t['worst']:.2f} at M={t['worst_m']} {t['status']}{note}"


def report(setup: dict, everyone: list[dict], rows: list[int], out: str) -> tuple[str, dict]:
    """Prints nothing; returns the text and the JSON document, and writes both (and the
    PNG) under ``out``."""
    methods = ["ours"] + [p for p in PEERS if p in setup["methods"]]
    eager, graph = combine(everyone, rows, "eager"), combine(everyone, rows, "graph")
    problems = sorted({p for r in everyone for c in r["check"].values() for p in c["problems"]})
    agreement = {m: everyone[0]["check"][m]["agreement"] for m in rows}
    unit = "device us (CUDA events)" if setup["device"] == "cuda" else "wall-clock us (CPU)"
    lines = [setup["where"]]
    lines += [f"peer {k}: unavailable: {v}" for k, v in setup["unavailable"].items()]
    lines += _table(f"eager, a burst of {setup['iters']} calls, {unit}", eager, rows, methods)
    if graph:
        lines += _table(f"CUDA-graph replay, {unit}", graph, rows, methods)
        why = {
            f"{op}/{meth}: {w}"
            for r in everyone
            for d in r["not_captured"].values()
            for (op, meth), w in d.items()
        }
        lines += [f"not capturable: {w}" for w in sorted(why)]
    lines.append(
        "check: greedy tokens equal across methods, inputs unchanged: "
        + ("ok" if not problems else "FAILED: " + "; ".join(problems))
    )
    if any(agreement.values()):
        lines.append("token agreement ours vs vllm (share of rows; definitions may differ):")
        for op in OPS:
            shares = " ".join(f"M={m}:{agreement[m].get(op, 0):.2f}" for m in rows)
            lines.append(f"  {op:<12} {shares}")
    goals = targets(eager, graph, rows, setup["target_note"])
    lines.append("targets (against vLLM's kernels):")
    if "vllm" in methods:
        lines += ["  " + _target_line(t) for t in goals]
    else:
        lines.append("  not measured: peer vllm unavailable")
    doc = {
        "setup": setup,
        "eager": _keyed(eager),
        "graph": _keyed(graph),
        "problems": problems,
        "agreement": {str(m): a for m, a in agreement.items()},
        "targets": goals,
    }
    stem = os.path.join(out, setup["stem"])
    text = "\n".join(lines)
    with open(stem + ".txt", "w") as f:
        f.write(text + "\n")
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    text += f"\nwrote {stem}.txt, {stem}.json\n" + plot(doc, stem + ".png", rows)
    return text, doc


def _keyed(cells: dict) -> dict:
    return {str(m): ops for m, ops in cells.items()}


def plot(doc: dict, path: str, rows: list[int]) -> str:
    """Latency against M, log-log, one panel per op; solid eager, dashed graph replay."""
    plt = pyplot()
    if plt is None:
        return SKIPPED
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), squeeze=False)
    colors = {"ours": "tab:blue", "vllm": "tab:red", "torch": "tab:gray"}
    for ax, op in zip(axes.flat, OPS, strict=True):
        for mode, style in (("eager", "-"), ("graph", "--")):
            for meth, color in colors.items():
                pts = [
                    (int(m), c[op][meth]["median"])
                    for m, c in doc[mode].items()
                    if meth in c.get(op, {})
                ]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        style,
                        color=color,
                        marker="o",
                        label=f"{meth} {mode}",
                    )
        ax.set(xscale="log", yscale="log", title=op, xlabel="M (rows)", ylabel="us per call")
        ax.legend(fontsize=7)
    fig.suptitle(doc["setup"]["where"] + " (lower is better)", fontsize=9)
    return save(plt, fig, path, dpi=90)
