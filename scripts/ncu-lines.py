"""Where one kernel's time goes, by source line, from Nsight Compute's source page.

``python scripts/ncu-lines.py LINES.csv [N]``: ``LINES.csv`` is what ``ncu ... --section
SourceCounters --page source --print-source cuda,sass --csv`` printed (see
``scripts/sampling-ncu-target.py``). Prints each file's share of the warp-stall samples
(where the warps spent their cycles, issuing or stalled), then the ``N`` (default 40)
source lines with the most, with the instructions each executed (warp level). Triton
inlines device functions, so a line of a helper counts for every call of it.
"""

from __future__ import annotations

import collections
import csv
import sys


def lines(path: str) -> list[tuple[int, int, str, str, str]]:
    """``(samples, instructions, file, line, source)`` of every source line."""
    out, name = [], "?"
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) >= 2 and row[0] == "File Path":
                name = row[1].rsplit("/", 1)[-1]
            elif len(row) > 7 and row[0] not in ("", "Line No") and row[4] not in ("", "-"):
                executed = int(row[7]) if row[7] not in ("", "-") else 0
                out.append((int(row[4]), executed, name, row[0], row[1]))
    return out


def main() -> None:
    rows = sorted(lines(sys.argv[1]), reverse=True)
    total = sum(r[0] for r in rows) or 1
    files: collections.Counter[str] = collections.Counter()
    for samples, _, name, _, _ in rows:
        files[name] += samples
    print(f"{total} samples; by file: " + ", ".join(
        f"{name} {100 * n / total:.1f}%" for name, n in files.most_common()
    ))  # fmt: skip
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    for samples, executed, name, line, source in rows[:top]:
        print(f"{100 * samples / total:5.1f}% {executed:>10} {name}:{line}  {source[:90]}")


if __name__ == "__main__":
    main()
