"""The gather benchmark's PNG: latency against M, one line per method, log-log, one panel
per vocab size.

Eager points carry min-max whiskers over the timed passes; lower is better."""

from __future__ import annotations

from typing import Any

from ..plot import SKIPPED, banner, pyplot, save

STYLE = {
    "stock": ("tab:red", "-"),
    "nccl_symm": ("tab:orange", "-"),
    "ce_pull": ("tab:purple", "-"),
    "ours": ("tab:blue", "-"),
    "ours_checked": ("tab:cyan", "-"),
}


def _whiskers(medians: list[float], passes: list[list[float] | None]) -> list[list[float]]:
    """Min-max whiskers over the timed passes (each pass is a median over ranks' bursts),
    widened to include the plotted median; zero where a point has no passes."""
    lo, hi = [], []
    for med, ps in zip(medians, passes, strict=True):
        ps = [p for p in (ps or []) if p is not None] or [med]
        lo.append(max(0.0, med - min(min(ps), med)))
        hi.append(max(0.0, max(max(ps), med) - med))
    return [lo, hi]


def plot(doc: dict[str, Any], path: str) -> str:
    """Writes ``path``; returns a line saying what happened."""
    plt = pyplot()
    if plt is None:
        return SKIPPED
    info, results = doc["machine"], doc["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(6.4 * len(results), 4.8), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        rows = res["rows"]
        ms = [r["m"] for r in rows]
        for name, (color, ls) in STYLE.items():
            eager = [(r["m"], r["device_us"][name]) for r in rows if name in r["device_us"]]
            if eager:
                xs = [m for m, _ in eager]
                ys = [t["median"] for _, t in eager]
                ax.errorbar(
                    xs,
                    ys,
                    yerr=_whiskers(ys, [t.get("passes") for _, t in eager]),
                    fmt="o" + ls,
                    color=color,
                    ms=3,
                    capsize=2,
                    elinewidth=0.8,
                    label=f"{name} (eager)",
                )
            graph = [
                (r["m"], r["graph_us"][name]["median"])
                for r in rows
                if r["graph_us"].get(name, {}).get("status") == "ok"
            ]
            if graph:
                ax.plot(
                    *zip(*graph, strict=True),
                    ":",
                    color=color,
                    marker="x",
                    ms=3,
                    label=f"{name} (graph replay)",
                )
        lim = [(m, r["limit_us"]) for m, r in zip(ms, rows, strict=True) if r["limit_us"]]
        if lim:
            ax.plot(*zip(*lim, strict=True), "--", color="black", label="limit")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_yscale("log")
        ax.set_xlabel("M (rows)")
        unit = "µs per call" + (" (device)" if doc["timer"] == "cuda_events" else "")
        ax.set_ylabel(unit + ", lower is better")
        ax.set_title(f"V={res['vocab']} {res['dtype']}, tp={info['tp']}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    title, color = banner(info)
    fig.suptitle(title, color=color)
    return save(plt, fig, path, dpi=120)
