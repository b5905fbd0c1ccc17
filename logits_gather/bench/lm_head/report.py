"""``--head``'s report: the table per vocabulary size, the JSON and the PNG (rank 0)."""

from __future__ import annotations

import os
from typing import Any

from ..plot import SKIPPED, pyplot, save
from ..report import cell, mode_lines, preamble_lines, table, write

TIMED = ("head alone", "fused", "cublas+ours", "cublas+stock")
# ours / peer: every ratio below 1 means ours is faster
RATIOS = (
    ("fused", "head alone"),
    ("fused", "cublas+ours"),
    ("fused", "cublas+stock"),
    ("cublas+ours", "cublas+stock"),
)


def _ratio(row: dict[str, Any], ours: str, peer: str) -> str:
    a, b = row["device_us"].get(ours), row["device_us"].get(peer)
    if not a or not b or not b["median"]:
        return "n/a"
    return f"{a['median'] / b['median']:.2f}"


def lines(res: dict[str, Any], info: dict[str, Any]) -> list[str]:
    out = [
        f"LM head + gather: tp={info['tp']}, H={res['hidden']}, V={res['vocab']} "
        f"({res['columns']} columns per rank), LogitsGather backend {res['backend']}",
    ]
    for name, st in res["methods"].items():
        if st["status"] != "ok":
            out.append(f"  {name}: {st['status']}: {st['reason']}")
    if not res["rows"]:
        return [*out, "nothing timed: a method failed the check"]
    out += [
        "device µs per call (median over bursts, max over ranks; ± the spread between "
        "the two passes); the ratio columns are ours/peer: LOWER IS BETTER",
    ]
    if info["tp"] == 1:
        out.append(
            "world size 1: no peers, so the gathers move nothing between GPUs; "
            "fused/head alone is the figure that counts"
        )
    head = ["M", *TIMED, *(f"{a}/{b}" for a, b in RATIOS), "linear's path"]
    rows = [
        [
            str(r["m"]),
            *(cell(r["device_us"].get(n)) for n in TIMED),
            *(_ratio(r, a, b) for a, b in RATIOS),
            r["path"],
        ]
        for r in res["rows"]
    ]
    return out + table(head, rows)


def plot(doc: dict[str, Any], path: str) -> str:
    """Device µs against M, one line per method, log-log, one panel per V."""
    plt = pyplot()
    if plt is None:
        return SKIPPED
    results = [r for r in doc["results"] if r["rows"]]
    if not results:
        return "PNG skipped: nothing was timed"
    fig, axes = plt.subplots(1, len(results), figsize=(6.4 * len(results), 4.8), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        ms = [r["m"] for r in res["rows"]]
        for name in TIMED:
            ax.plot(ms, [r["device_us"][name]["median"] for r in res["rows"]], "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M (rows)")
        ax.set_ylabel("device µs per call (lower is better)")
        ax.set_title(f"tp={doc['machine']['tp']} H={res['hidden']} V={res['vocab']}")
        ax.legend()
    if doc["latency_only"]:
        fig.suptitle("LATENCY ONLY: ranks share GPUs")
    return save(plt, fig, path)


def finish(info: dict[str, Any], ctx: Any, results: list[dict[str, Any]]) -> None:
    cfg = ctx.cfg
    text: list[str] = []
    for res in results:
        text += [*lines(res, info), ""]
    notes = mode_lines(info)
    print("\n".join([*preamble_lines(info, ctx), *text, *notes]), flush=True)
    vocabs = "-".join(map(str, cfg.vocabs))
    base = os.path.join(
        cfg.out, f"head_tp{ctx.world}_{info['placement']}_{cfg.dtype}_H{cfg.head}_V{vocabs}"
    )
    write(base, "logits_gather.bench --head", info, ctx, cfg, notes, results, text, plot)
