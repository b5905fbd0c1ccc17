"""The sampling benchmark's tables: µs per call per op, M and method, the ratios ours /
peer and ours / read limit, and the noise flags.

A cell is flagged noisy (``!`` in the table, ``"noisy": [reasons]`` in the JSON) when
its two timed passes differ by more than ``NOISY_PCT`` percent, or when it is more than
``NOISY_PCT`` percent slower than the same op and method at the next larger M (more
rows cannot cost less): read no ratio from such a cell."""

from __future__ import annotations

from .peers import OPS

PEERS = ("vllm", "torch")
NOISY_PCT = 20.0


def flag_noise(cells: dict, rows: list[int]) -> list[str]:
    """Adds ``"noisy"`` to every summary in ``cells`` ({m: {op: {method: summary}}});
    returns one line per flagged cell."""
    flagged = []
    for op in OPS:
        for i, m in enumerate(rows):
            for meth, s in cells.get(m, {}).get(op, {}).items():
                why = []
                if (s.get("spread_pct") or 0) > NOISY_PCT:
                    why.append(f"passes differ by {s['spread_pct']:.0f}%")
                nxt = (
                    cells.get(rows[i + 1], {}).get(op, {}).get(meth) if i + 1 < len(rows) else None
                )
                if nxt and s["median"] > nxt["median"] * (1 + NOISY_PCT / 100):
                    why.append(f"slower than at M={rows[i + 1]} ({nxt['median']:.1f} us)")
                s["noisy"] = why
                if why:
                    flagged.append(f"{op} M={m} {meth}: " + ", ".join(why))
    return flagged


def _cell(v: dict | None) -> str:
    if not v:
        return f"{'n/a':>16}"
    mark = "!" if v.get("noisy") else " "
    return f"{v['median']:>10.1f} ±{v['spread_pct'] or 0:>3.0f}%{mark}"


def table(title: str, cells: dict, rows: list[int], methods: list[str], limit: dict) -> list:
    """The lines of one table; ``limit`` is {m: read-limit µs} (empty: no column)."""
    peers = [p for p in PEERS if p in methods]
    head = f"{'op':<12}{'M':>5}" + "".join(f"{m + ' us':>16}" for m in methods)
    head += "".join(f"{'ours/' + p:>12}" for p in peers)
    head += f"{'read us':>10}{'ours/read':>11}" if limit else ""
    lines = [title, head]
    for op in OPS:
        for m in rows:
            t = {meth: cells.get(m, {}).get(op, {}).get(meth) for meth in methods}
            line = f"{op:<12}{m:>5}" + "".join(_cell(t[meth]) for meth in methods)
            for p in peers:
                ok = t["ours"] and t[p]
                line += f"{t['ours']['median'] / t[p]['median']:>12.2f}" if ok else f"{'n/a':>12}"
            if limit:
                ours = t["ours"]["median"] / limit[m] if t["ours"] else None
                line += f"{limit[m]:>10.2f}" + (f"{ours:>11.1f}" if ours else f"{'n/a':>11}")
            lines.append(line)
    return lines


def legend(cpu: bool, iters: int) -> list[str]:
    """What the tables' columns mean, and on CPU why the figures are not representative."""
    lines = [
        "ratio columns are ours / peer: lower is better, below 1 means ours is faster;",
        "read us: the shard read once at the copy bandwidth; ours/read: reads of the shard "
        "that ours costs;",
        f"! marks a noisy cell (passes differ by more than {NOISY_PCT:.0f}%, or slower "
        "than at a larger M): read no ratio from it",
    ]
    if cpu:
        lines.append(
            f"!! CPU: wall-clock µs of the torch (host) code paths on gloo ranks, {iters} "
            "calls per burst: NOT REPRESENTATIVE of any GPU; the CPU run checks the harness"
        )
    return lines
