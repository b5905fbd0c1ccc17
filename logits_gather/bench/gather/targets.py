"""The targets each run checks against itself (every figure from the same run): the
host cost of an eager call, and the device-time targets. Each check is
``met``, ``MISSED`` or ``not measured`` (with the reason)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

HOST_TARGET_US = 5.0
HOST_TARGET_RATIO = 0.5
WORD = {True: "met", False: "MISSED"}


def host(res: dict[str, Any]) -> dict[str, Any]:
    def typical(key: str) -> float | None:
        vals = [r["host_us"][key]["median"] for r in res["rows"] if key in r["host_us"]]
        return statistics.median(vals) if vals else None

    ours, nccl = typical("ours"), typical("nccl_ag_ws1")
    out: dict[str, Any] = {
        "ours_host_us": ours,
        "nccl_ag_ws1_host_us": nccl,
        "stock_host_us": typical("stock"),
        "stock_ws1_host_us": typical("stock_ws1"),
        "ours_checked_host_us": typical("ours_checked"),
    }
    out["ours_le_5us"] = None if ours is None else ours <= HOST_TARGET_US
    out["ratio_vs_nccl"] = ours / nccl if ours is not None and nccl else None
    out["ratio_le_half"] = (
        None if out["ratio_vs_nccl"] is None else out["ratio_vs_nccl"] <= HOST_TARGET_RATIO
    )
    return out


def _at(res: dict[str, Any], m: int) -> dict[str, Any] | None:
    return next((r for r in res["rows"] if r["m"] == m), None)


def _ratio(res: dict[str, Any], m: int, kind: str) -> tuple[float | None, str | None]:
    row = _at(res, m)
    if row is None:
        return None, f"M={m} is not in --rows"
    got = {n: row[kind].get(n) for n in ("ours", "stock")}
    bad = [n for n, g in got.items() if not g or g.get("status", "ok") != "ok"]
    if bad:
        return None, f"{' and '.join(bad)} not timed ({kind})"
    return got["ours"]["median"] / got["stock"]["median"], None


def _every(
    res: dict[str, Any], pick: Callable[[dict], bool], value: Callable[[dict], Any], what: str
) -> tuple[Any, str | None]:
    rows = [r for r in res["rows"] if pick(r)]
    if not rows:
        return None, "no M in --rows qualifies"
    vals = [value(r) for r in rows]
    if any(v is None for v in vals):
        return None, what
    return vals, None


def device(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The device-time targets (stated for tp=2, one process per GPU)."""
    checks: list[dict[str, Any]] = []

    def add(
        text: str, value: Any, why: str | None, ok: Callable[[Any], bool], shown: str = ""
    ) -> None:
        status = "not measured" if why else WORD[ok(value)]
        checks.append(
            {
                "target": text,
                "value": value,
                "status": status,
                "why": why,
                "shown": shown if not why else "",
            }
        )

    for m, bound in ((1, 0.60), (64, 0.38)):
        r, why = _ratio(res, m, "device_us")
        add(
            f"ours/stock at M={m} <= {bound:.2f} (device time)",
            r,
            why,
            lambda v, b=bound: v <= b,
            f"{r:.2f}" if r is not None else "",
        )
    r, why = _ratio(res, 1, "graph_us")
    add(
        "ours/stock at M=1 under graph replay <= 0.55",
        r,
        why,
        lambda v: v <= 0.55,
        f"{r:.2f}" if r is not None else "",
    )
    lim_why = None if res["limit"].get("status") == "ok" else f"limit n/a: {res['limit']['reason']}"
    for lo, bound in ((1, 90.0), (64, 95.0)):
        vals, why = _every(
            res,
            lambda r, lo=lo: r["m"] >= lo,
            lambda r: r.get("pct_of_limit_raw"),
            "ours not timed at some M",
        )
        why = lim_why or why
        add(
            f">= {bound:.0f}% of the limit at every M" + (f" >= {lo}" if lo > 1 else ""),
            vals,
            why,
            lambda v, b=bound: min(v) >= b,
            f"lowest {min(vals):.0f}%" if vals and not why else "",
        )

    def vs_nccl(r: dict[str, Any]) -> float | None:
        o, n = r["device_us"].get("ours"), r["device_us"].get("nccl_symm")
        return o["median"] / n["median"] if o and n else None

    vals, why = _every(res, lambda r: True, vs_nccl, "nccl_symm or ours not timed at some M")
    add(
        "faster than nccl_symm at every M",
        vals,
        why,
        lambda v: max(v) < 1.0,
        f"worst ours/nccl_symm {max(vals):.2f}" if vals and not why else "",
    )
    return checks


def lines(res: dict[str, Any], mode: str) -> list[str]:
    t, out = res["targets"]["host"], []
    out.append("host-cost targets (median over M; per-rank median, max over ranks):")
    if t["ours_host_us"] is None:
        out.append("  not measured (needs CUDA; on CPU every call is synchronous)")
    else:
        out.append(
            f"  ours {t['ours_host_us']:.2f} µs per eager call <= {HOST_TARGET_US:.0f} "
            f"µs: {WORD[t['ours_le_5us']]}"
        )
        if t["ratio_vs_nccl"] is None:
            out.append(f"  ours vs NCCL all_gather_into_tensor: not measured ({res.get('ws1')})")
        else:
            out.append(
                f"  ours / NCCL all_gather_into_tensor at world size 1 "
                f"({t['nccl_ag_ws1_host_us']:.2f} µs) = {t['ratio_vs_nccl']:.2f} <= "
                f"{HOST_TARGET_RATIO}: {WORD[t['ratio_le_half']]}"
            )
        for key, text in (
            ("stock_ws1_host_us", "vLLM stock path at world size 1"),
            ("ours_checked_host_us", "ours_checked (check_calls=True)"),
        ):
            if t[key] is not None:
                out.append(f"  ({text}: {t[key]:.2f} µs)")
    out.append(
        "targets (stated for tp=2, one process per GPU over NVLink; all figures from this run):"
    )
    if mode == "cpu":
        return out + ["  not applicable: CPU run"]
    if mode != "nccl":
        out.append("  (this run is LATENCY ONLY: ranks share GPUs; the targets do not apply)")
    for c in res["targets"]["device"]:
        detail = c["shown"] or c["why"] or ""
        out.append(f"  {c['target']}: {c['status']}" + (f" ({detail})" if detail else ""))
    return out
