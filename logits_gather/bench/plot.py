"""What every benchmark's PNG shares: matplotlib on the Agg backend when it is
installed, and saving a figure. Each wing draws its own figure."""

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


def save(plt: Any, fig: Any, path: str, dpi: int | None = None) -> str:
    """Lays out, writes and closes ``fig``; returns the line saying so."""
    fig.tight_layout()
    fig.savefig(path, **({} if dpi is None else {"dpi": dpi}))
    plt.close(fig)
    return f"wrote {path}"
