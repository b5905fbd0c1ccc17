"""The sampling benchmark's PNG: µs per call against M, log-log, one row of panels per
profile and one panel per op; eager solid, graph replay dashed, the read limit dotted
black. Lower is better. On CPU the banner says the figures are not representative."""

from __future__ import annotations

from ..plot import SKIPPED, plain_log_axes, pyplot, save
from .peers import OPS

COLORS = {"ours": "tab:blue", "vllm": "tab:red", "torch": "tab:gray"}


def plot(doc: dict, path: str, rows: list[int]) -> str:
    plt = pyplot()
    if plt is None:
        return SKIPPED
    names = list(doc["profiles"])
    fig, axes = plt.subplots(
        len(names), len(OPS), figsize=(3.2 * len(OPS), 2.8 * len(names) + 0.6), squeeze=False
    )
    for row, profile in zip(axes, names, strict=True):
        prof = doc["profiles"][profile]
        for ax, op in zip(row, OPS, strict=True):
            for mode, style in (("eager", "-"), ("graph", "--")):
                for meth, color in COLORS.items():
                    pts = [
                        (int(m), c[op][meth]["median"])
                        for m, c in prof[mode].items()
                        if meth in c.get(op, {})
                    ]
                    if pts:
                        ax.plot(
                            *zip(*pts, strict=True),
                            style,
                            color=color,
                            marker="o",
                            ms=3,
                            label=f"{meth} {mode}",
                        )
            lim = sorted((int(m), us) for m, us in prof["read_limit_us"].items())
            if lim:
                ax.plot(*zip(*lim, strict=True), ":", color="black", label="read limit")
            plain_log_axes(ax, rows)
            ax.set_title(f"{profile}: {op}", fontsize=9)
            ax.set_xlabel("M (rows)", fontsize=8)
            ax.set_ylabel("us per call", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=6)
    cpu = doc["setup"]["device"] == "cpu"
    title = doc["setup"]["where"] + " (lower is better)"
    if cpu:
        title += "\nCPU: wall-clock of the torch paths, NOT REPRESENTATIVE of any GPU"
    fig.suptitle(title, fontsize=10, color="darkred" if cpu else "black")
    return save(plt, fig, path, dpi=80)
