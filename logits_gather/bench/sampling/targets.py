"""The sampling benchmark's targets: ours against vLLM's kernels, per profile, from the
same run. Ratios are ours / vllm: lower is better."""

from __future__ import annotations

from .peers import OPS

# Against vLLM's own kernels, graph replay at every M (eager: EAGER_TARGET for every op).
GRAPH_TARGETS = {
    "greedy": 0.60,
    "sample": 0.45,
    "min_p": 0.35,
    "top_k": 0.25,
    "top_p": 0.40,
    "top_k_top_p": 0.30,
}
EAGER_TARGET = 0.6


def ratio(cells: dict, m: int, op: str, peer: str) -> float | None:
    t = cells.get(m, {}).get(op, {})
    if "ours" in t and peer in t:
        return t["ours"]["median"] / t[peer]["median"]
    return None


def targets(eager: dict, graph: dict, rows: list[int], setup_ok: str, profile: str) -> list:
    """Every target against vLLM's kernels on ``profile``: met, MISSED or not measured."""
    out = []
    for mode, cells, bound_of in (
        ("graph replay", graph, GRAPH_TARGETS.get),
        ("eager", eager, lambda op: EAGER_TARGET),
    ):
        for op in OPS:
            bound = bound_of(op)
            got = {m: ratio(cells, m, op, "vllm") for m in rows}
            have = {m: r for m, r in got.items() if r is not None}
            entry = {
                "target": f"{profile} {mode} {op}: ours/vllm <= {bound} at every M",
                "profile": profile,
                "bound": bound,
            }
            if len(have) < len(rows):
                miss = [m for m in rows if got[m] is None]
                entry.update(status="not measured", why=f"no ours and vllm figure at M={miss}")
            else:
                worst = max(have, key=have.get)
                entry.update(
                    status="met" if have[worst] <= bound else "MISSED",
                    worst=have[worst],
                    worst_m=worst,
                )
            if setup_ok:
                entry["note"] = setup_ok
            out.append(entry)
    return out


def target_line(t: dict) -> str:
    if t["status"] == "not measured":
        return f"{t['target']}: not measured ({t['why']})"
    note = f" ({t['note']})" if "note" in t else ""
    return f"{t['target']}: worst {t['worst']:.2f} at M={t['worst_m']} {t['status']}{note}"
