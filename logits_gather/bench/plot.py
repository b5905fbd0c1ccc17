"""What every benchmark's PNG shares: matplotlib on the Agg backend when it is
installed, the banner that says where the run ran, log axes with plain tick labels,
and saving a figure. Each wing draws its own figure."""

from __future__ import annotations

from typing import Any

SKIPPED = "PNG skipped: matplotlib is not installed (pip install 'logits-gather[bench]')"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def banner(info: dict[str, Any], what: str = "logits_gather") -> tuple[str, str]:
    """The figure's title for ``info["mode"]`` and its colour (dark red unless the run
    is one rank per GPU): the reader sees CPU and latency-only runs at a glance."""
    tp, name = info["tp"], info.get("gpu_name")
    title = {
        "nccl": f"{what}: {tp}x {name}",
        "colocated": f"{what}: {tp} ranks sharing one {name} "
        "(LATENCY ONLY; says nothing about NVLink)",
        "spread": f"{what}: {tp} ranks over {info.get('gpus_used')}x "
        f"{name} (LATENCY ONLY: ranks share SMs and links)",
        "cpu": f"{what}: gloo ranks on CPU (says nothing about GPUs or NVLink)",
    }[info["mode"]]
    return title, "black" if info["mode"] == "nccl" else "darkred"


def plain_log_axes(ax: Any, ms: list[int]) -> None:
    """Log-log axes whose ticks read as plain numbers (``1``, ``4``, ``20``, ``500``),
    not ``10^0``: x ticks at the measured M only; y ticks in plain notation, the minor
    ones (2 and 5 per decade) labelled too where the data span under two decades.
    Call it after plotting."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.xaxis.set_minor_locator(NullLocator())
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    lo, hi = ax.get_ylim()
    ax.yaxis.set_minor_formatter(plain if hi < 100 * lo else NullFormatter())
    ax.grid(True, which="both", alpha=0.3)


def save(plt: Any, fig: Any, path: str, dpi: int | None = None) -> str:
    """Lays out, writes and closes ``fig``; returns the line saying so."""
    fig.tight_layout()
    fig.savefig(path, **({} if dpi is None else {"dpi": dpi}))
    plt.close(fig)
    return f"wrote {path}"
