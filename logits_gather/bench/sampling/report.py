"""The sampling benchmark's report, from every rank's measurements: per profile a table
for eager calls and one for graph replay (``tables.py``), the entropy of its rows, the
token agreement with vLLM, and the targets (``targets.py``); the JSON; the PNG
(``figure.py``). Cells are the median of bursts per rank, then the max over ranks
(``summarize`` in ``bench/timing.py``). Ratios are ours / peer: lower is better."""

from __future__ import annotations

import json
import os
from typing import Any

from ..timing import summarize
from . import readlimit, tables
from .figure import plot
from .peers import OPS
from .profiles import entropy_range
from .targets import target_line, targets


def combine(everyone: list[dict[str, Any]], rows: list[int], mode: str) -> dict:
    """{m: {op: {method: summary}}} for ``mode`` ("eager" or "graph") of one profile;
    ``everyone`` holds each rank's measurements of that profile."""
    out: dict = {}
    for m in rows:
        for op, meth in everyone[0][mode].get(m, {}):
            passes = [r[mode][m][op, meth] for r in everyone]
            out.setdefault(m, {}).setdefault(op, {})[meth] = summarize(passes)
    return out


def _profile(setup: dict, profile: str, mine: list[dict], rows: list[int], gbps: float) -> tuple:
    """(text lines, JSON entry, targets) of one profile."""
    methods = ["ours"] + [p for p in tables.PEERS if p in setup["methods"]]
    eager, graph = combine(mine, rows, "eager"), combine(mine, rows, "graph")
    noisy = tables.flag_noise(eager, rows) + tables.flag_noise(graph, rows)
    cols = setup["vocab"] // setup["tp"]
    limit = {m: readlimit.read_limit_us(m, cols, gbps) for m in rows}
    ent = {m: entropy_range(mine[0]["entropy"][m]) for m in rows}
    every = entropy_range([v for m in rows for v in mine[0]["entropy"][m]])
    lines = [
        "",
        f"== profile {profile}: entropy of the sampled rows {every['min']:.2f} to "
        f"{every['max']:.2f} nats ({every['greedy_rows']} greedy rows of "
        f"{every['rows'] + every['greedy_rows']})",
    ]
    lines += tables.table(f"{profile}, eager, {setup['unit']}", eager, rows, methods, limit)
    if graph:
        lines += tables.table(f"{profile}, CUDA-graph replay", graph, rows, methods, limit)
        why = {
            f"{op}/{meth}: {w}"
            for r in mine
            for d in r["not_captured"].values()
            for (op, meth), w in d.items()
        }
        lines += [f"not capturable: {w}" for w in sorted(why)]
    agreement = {m: mine[0]["check"][m]["agreement"] for m in rows}
    if any(agreement.values()):
        lines.append("token agreement ours vs vllm (share of rows; definitions may differ):")
        for op in OPS:
            shares = " ".join(f"M={m}:{agreement[m].get(op, 0):.2f}" for m in rows)
            lines.append(f"  {op:<12} {shares}")
    goals = targets(eager, graph, rows, setup["target_note"], profile)
    entry = {
        "eager": _keyed(eager),
        "graph": _keyed(graph),
        "agreement": _keyed(agreement),
        "entropy_nats": {**every, "per_m": _keyed(ent)},
        "read_limit_us": _keyed(limit),
        "noisy": noisy,
    }
    return lines, entry, goals


def report(setup: dict, everyone: list[dict], rows: list[int], out: str) -> tuple[str, dict]:
    """Prints nothing; returns the text and the JSON document, and writes both (and the
    PNG) under ``out``."""
    cpu = setup["device"] == "cpu"
    setup = {**setup, "unit": "wall-clock us (CPU)" if cpu else "device us (CUDA events)"}
    copy = readlimit.combine([r["copy"] for r in everyone])
    problems = sorted(
        {
            p
            for r in everyone
            for pr in r["profiles"].values()
            for c in pr["check"].values()
            for p in c["problems"]
        }
    )
    lines = [setup["where"]]
    lines += [f"peer {k}: unavailable: {v}" for k, v in setup["unavailable"].items()]
    lines += tables.legend(cpu, setup["iters"])
    lines.append(
        f"copy bandwidth (read + written, slowest rank): {copy['gbps']:.1f} GB/s"
        + (" (host memory)" if cpu else "")
    )
    doc: dict[str, Any] = {"setup": setup, "copy_bandwidth": copy, "profiles": {}}
    goals: list = []
    for profile in setup["profiles"]:
        mine = [r["profiles"][profile] for r in everyone]
        text, doc["profiles"][profile], got = _profile(setup, profile, mine, rows, copy["gbps"])
        lines += text
        goals += got
    noisy = sum(len(p["noisy"]) for p in doc["profiles"].values())
    lines += [
        "",
        f"noisy cells (!): {noisy}" + (" (listed in the JSON under each profile)" if noisy else ""),
        "check: greedy tokens equal across methods, inputs unchanged: "
        + ("ok" if not problems else "FAILED: " + "; ".join(problems)),
        "targets (against vLLM's kernels):",
    ]
    if "vllm" in setup["methods"]:
        lines += ["  " + target_line(t) for t in goals]
    else:
        lines.append("  not measured: peer vllm unavailable")
    doc.update(problems=problems, targets=goals)
    stem = os.path.join(out, setup["stem"])
    text = "\n".join(lines)
    with open(stem + ".txt", "w") as f:
        f.write(text + "\n")
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    text += f"\nwrote {stem}.txt, {stem}.json\n" + plot(doc, stem + ".png", rows)
    return text, doc


def _keyed(cells: dict) -> dict:
    return {str(m): v for m, v in cells.items()}
