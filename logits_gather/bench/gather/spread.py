"""``python -m logits_gather.bench.gather.spread OUTDIR``: the spread target across runs.

Target: 8 ranks spread over 2 GPUs, graph replay at M=1, at most 1.6x the tp=2
figure (one process per GPU) measured alongside it. The two figures come from two
runs in the same directory (``scripts/multi-gpu-run.sh`` makes both); the first
V they share is compared. Prints met / MISSED / not measured for every spread run
found (tp=4 is shown for information; the target names tp=8).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BOUND = 1.6


def _graph_m1(doc: dict[str, Any]) -> dict[int, float]:
    """``{V: ours graph-replay µs at M=1}`` for the results that have one."""
    out = {}
    for res in doc["results"]:
        row = next((r for r in res["rows"] if r["m"] == 1), None)
        g = (row or {}).get("graph_us", {}).get("ours", {})
        if g.get("status") == "ok":
            out[res["vocab"]] = g["median"]
    return out


def compare(outdir: Path) -> list[str]:
    docs = []
    for path in sorted(outdir.glob("bench_tp*.json")):
        try:
            docs.append((path.name, json.loads(path.read_text())))
        except (OSError, ValueError) as exc:
            print(f"skipping {path.name}: {exc}", file=sys.stderr)
    base = [(n, d) for n, d in docs if d["machine"]["mode"] == "nccl" and d["machine"]["tp"] == 2]
    spread = [(n, d) for n, d in docs if d["machine"]["mode"] == "spread"]
    lines = [
        f"spread target: ours graph replay at M=1, spread tp=8 <= {BOUND}x tp=2 (one "
        "process per GPU)"
    ]
    if not base or not spread:
        return lines + [
            f"  not measured: found {len(base)} tp=2 run(s), {len(spread)} spread "
            f"run(s) in {outdir}"
        ]
    ref, ref_fig = base[0][0], _graph_m1(base[0][1])
    for name, doc in spread:
        tp, mine = doc["machine"]["tp"], _graph_m1(doc)
        shared = [v for v in mine if v in ref_fig]
        if not shared:
            lines.append(
                f"  tp={tp} ({name}): not measured (no V with graph replay at M=1 in "
                f"both this run and {ref})"
            )
            continue
        v = shared[0]
        ratio = mine[v] / ref_fig[v]
        verdict = ("met" if ratio <= BOUND else "MISSED") if tp == 8 else "for information"
        lines.append(
            f"  tp={tp} spread {mine[v]:.2f} µs / tp=2 {ref_fig[v]:.2f} µs (V={v}) = "
            f"{ratio:.2f}x: {verdict}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m logits_gather.bench.gather.spread OUTDIR", file=sys.stderr)
        return 2
    print("\n".join(compare(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
