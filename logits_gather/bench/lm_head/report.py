"""``--head``'s report: the table per vocabulary size, the JSON and the PNG (rank 0).

The JSON keeps the methods' names (``cublas+stock``...: ``F.linear`` is cuBLAS on a GPU);
the table and the PNG show what ran. On CPU ``F.linear`` is not cuBLAS and the times
are wall-clock, so they read ``F.linear+stock`` and ``wall-clock µs``. ``fused`` is
plotted only at the M where ``linear`` took the fused kernel; where it fell back to
``F.linear`` plus the gather, the PNG draws it as ``linear() fallback``."""

from __future__ import annotations

import os
from typing import Any

from ..plot import SKIPPED, banner, plain_log_axes, pyplot, save
from ..report import cell, mode_lines, preamble_lines, table, write

TIMED = ("head alone", "fused", "cublas+ours", "cublas+stock")
# ours / peer: every ratio below 1 means ours is faster
RATIOS = (
    ("fused", "head alone"),
    ("fused", "cublas+ours"),
    ("fused", "cublas+stock"),
    ("cublas+ours", "cublas+stock"),
)


def shown(name: str, cpu: bool) -> str:
    """What the table and PNG call a method or a path: no cuBLAS on CPU."""
    return name.replace("cublas", "F.linear").replace("cuBLAS", "F.linear") if cpu else name


def unit(info: dict[str, Any]) -> str:
    return "wall-clock µs (CPU)" if info["mode"] == "cpu" else "device µs (CUDA events)"


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
    cpu = info["mode"] == "cpu"
    out += [
        f"{unit(info)} per call (median over bursts, max over ranks; ± the spread between "
        "the two passes); the ratio columns are ours/peer: LOWER IS BETTER",
    ]
    if not any(r["path"].startswith("fused") for r in res["rows"]):
        out.append(
            "fused: linear took no fused kernel at any M (see linear's path): its column "
            "times LogitsGather.linear's fallback, F.linear + the gather"
        )
    if info["tp"] == 1:
        out.append(
            "world size 1: no peers, so the gathers move nothing between GPUs; "
            "fused/head alone is the figure that counts"
        )
    head = ["M", *(shown(n, cpu) for n in TIMED)]
    head += [f"{shown(a, cpu)}/{shown(b, cpu)}" for a, b in RATIOS] + ["linear's path"]
    rows = [
        [
            str(r["m"]),
            *(cell(r["device_us"].get(n)) for n in TIMED),
            *(_ratio(r, a, b) for a, b in RATIOS),
            shown(r["path"], cpu),
        ]
        for r in res["rows"]
    ]
    return out + table(head, rows)


def _lines(res: dict[str, Any], cpu: bool) -> list[tuple[str, list[tuple[int, float]]]]:
    """(label, points) per line: ``fused`` only where the fused kernel ran; the M where
    ``linear`` fell back form their own ``linear() fallback`` line."""
    out = []
    for name in TIMED:
        pts = [(r["m"], r["device_us"][name]["median"]) for r in res["rows"]]
        if name != "fused":
            out.append((shown(name, cpu), pts))
            continue
        fused = [r["path"].startswith("fused") for r in res["rows"]]
        out.append(("fused", [p for p, f in zip(pts, fused, strict=True) if f]))
        label = "linear() fallback: " + shown("cuBLAS", cpu) + "+gather"
        out.append((label, [p for p, f in zip(pts, fused, strict=True) if not f]))
    return [(label, pts) for label, pts in out if pts]


def plot(doc: dict[str, Any], path: str) -> str:
    """µs per call against M, one line per method, log-log, one panel per V."""
    plt = pyplot()
    if plt is None:
        return SKIPPED
    results = [r for r in doc["results"] if r["rows"]]
    if not results:
        return "PNG skipped: nothing was timed"
    info = doc["machine"]
    cpu = info["mode"] == "cpu"
    fig, axes = plt.subplots(1, len(results), figsize=(6.4 * len(results), 4.8), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        for label, pts in _lines(res, cpu):
            ax.plot(*zip(*pts, strict=True), "o-", label=label)
        plain_log_axes(ax, [r["m"] for r in res["rows"]])
        ax.set_xlabel("M (rows)")
        ax.set_ylabel(f"{unit(info)} per call (lower is better)", fontsize=8)
        ax.set_title(f"tp={info['tp']} H={res['hidden']} V={res['vocab']}")
        ax.legend(fontsize=7)
    title, color = banner(info, "logits_gather --head")
    fig.suptitle(title, color=color, fontsize=9)
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
