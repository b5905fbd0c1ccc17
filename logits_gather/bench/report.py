"""What rank 0 prints and writes: the preamble, the tables, the targets and the JSON."""

from __future__ import annotations

import datetime
import json
import os
import statistics
from typing import Any

from .cli import METHODS

TIMED = tuple(m for m in METHODS if m != "limit")
HOST_TARGET_US = 5.0
HOST_TARGET_RATIO = 0.5


def mode_lines(info: dict[str, Any]) -> list[str]:
    tp, mode = info["tp"], info["mode"]
    if mode == "cpu":
        return [f"mode: CPU, {tp} gloo ranks (no GPU is visible).",
                "!! These are gloo-over-loopback timings: they say nothing about GPUs or NVLink."]
    if mode == "colocated":
        lines = [f"mode: COLOCATED, {tp} processes share one GPU (cuda:0), gloo process group.",
                 "!! These timings say nothing about NVLink: every 'peer' store is a write to the "
                 "same GPU's memory, and the ranks' kernels compete for one GPU's SMs."]
        if not info.get("mps_pipe"):
            lines.append("!! No MPS daemon found: the ranks' kernels are time-sliced, so a call "
                         "can take milliseconds (start one with `nvidia-cuda-mps-control -d`).")
        return lines
    return [f"mode: {tp} GPUs, one rank per GPU, NCCL process group."]


def preamble(info: dict[str, Any], ctx: Any) -> None:
    cfg = ctx.cfg
    gpu = f"{info['gpu_count']}x {info['gpu_name']}" if info.get("gpu_name") else "no GPU"
    vocabs, rows = ",".join(map(str, cfg.vocabs)), ",".join(map(str, cfg.rows))
    print(f"logits_gather benchmark: tp={info['tp']}, {cfg.dtype}, V={vocabs}, M={rows}"
          + (" (--quick)" if cfg.quick else ""))
    parts = [gpu] + [f"{k} {info[k]}" for k in ("driver", "torch", "triton", "nccl")
                     if info.get(k)] + [f"host {info['hostname']}"]
    print("machine: " + ", ".join(parts))
    for line in mode_lines(info):
        print(line)
    print(flush=True)


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _cell(entry: dict[str, Any] | None, status: dict[str, Any] | None = None) -> str:
    """A timing as ``median ±spread%``, or why there is none."""
    if entry is None or entry.get("status", "ok") != "ok":
        st = (entry or status or {}).get("status")
        return "WRONG" if st == "WRONG" else "n/a"
    spread = entry.get("spread_pct")
    return _num(entry["median"]) + (f" ±{spread:.0f}%" if spread is not None else "")


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return [line(head), "-+-".join("-" * w for w in widths), *map(line, rows)]


def _method_lines(res: dict[str, Any]) -> list[str]:
    lines = ["methods:"]
    for name, st in res["methods"].items():
        if st["status"] == "ok" and name != "limit":
            lines.append(f"  {name:<10} ok ({st.get('detail', '')})")
        elif name != "limit":
            lines.append(f"  {name:<10} {st['status']}: {st['reason']}")
    lim = res["limit"]
    if "limit" in res["methods"]:
        cands = ", ".join(f"{k} {_num(v)}" for k, v in lim["candidates_gbps"].items())
        bar = lim["barrier"]
        bar_text = (f"{_num(bar['us'])} µs ({bar['source']})" if bar["status"] == "ok"
                    else f"unavailable: {bar['reason']}")
        bw = (f"{_num(lim['gbps'])} GB/s ({lim['bandwidth_source']})" if "gbps" in lim
              else "unavailable")
        lines.append(f"  {'limit':<10} bandwidth {bw}; candidates GB/s: {cands or 'none'}"
                     + (f" (push probe: {lim['push']['reason']})"
                        if lim["push"]["status"] != "ok" else ""))
        lines.append(f"  {'':<10} barrier {bar_text}")
    lines.append(f"NCCL symmetric kernels: {res['nccl_kernels'].get('symmetric')}")
    return lines


def device_table(res: dict[str, Any], cuda: bool = True) -> list[str]:
    head = ["M", *TIMED, "limit", "ours GB/s", "vs stock", "% of limit"]
    rows = []
    for row in res["rows"]:
        sp, pct = row["speedup_vs_stock"], row["pct_of_limit"]
        rows.append([str(row["m"]),
                     *(_cell(row["device_us"].get(n), res["methods"].get(n)) for n in TIMED),
                     _num(row["limit_us"]), _num(row["ours_gbps"]),
                     f"{sp:.2f}x" if sp else "n/a", f"{pct:.0f}%" if pct else "n/a"])
    return [f"V={res['vocab']} {res['dtype']} ({res['columns_per_rank']} columns per rank): "
            f"{'device' if cuda else 'wall-clock'} µs per call (median of bursts, max over ranks;"
            " ± spread of two passes)",
            *_table(head, rows)]


def host_table(res: dict[str, Any]) -> list[str]:
    cols = [("ours", "ours host"), ("stock", "stock host"), ("nccl_ag_ws1", "NCCL ag ws1 host"),
            ("stock_ws1", "stock ws1 host")]
    head = ["M", *(t for _, t in cols), "ours graph", "ours graph/eager", "stock graph",
            "stock graph/eager"]
    rows = []
    for row in res["rows"]:
        cells = [str(row["m"]), *(_cell(row["host_us"].get(k)) for k, _ in cols)]
        for n in ("ours", "stock"):
            g = row["graph_us"].get(n)
            ok = g is not None and g.get("status") == "ok"
            cells += [_cell(g), f"{g['vs_eager']:.2f}x" if ok and g["vs_eager"] else "n/a"]
        rows.append(cells)
    lines = ["host µs per eager call (ws1: at world size 1, NCCL on a 1-rank subgroup) and "
             "CUDA-graph replay µs per call", *_table(head, rows)]
    for row in res["rows"]:
        for n, g in row["graph_us"].items():
            if g.get("status") != "ok":
                lines.append(f"  M={row['m']} {n} graph {g['status']}: {g.get('reason')}")
    return lines


def targets(res: dict[str, Any]) -> dict[str, Any]:
    def typical(key: str) -> float | None:
        vals = [r["host_us"][key]["median"] for r in res["rows"] if key in r["host_us"]]
        return statistics.median(vals) if vals else None

    ours, nccl = typical("ours"), typical("nccl_ag_ws1")
    out: dict[str, Any] = {"ours_host_us": ours, "nccl_ag_ws1_host_us": nccl,
                           "stock_host_us": typical("stock"), "stock_ws1_host_us": typical(
                               "stock_ws1")}
    out["ours_le_5us"] = None if ours is None else ours <= HOST_TARGET_US
    out["ratio_vs_nccl"] = ours / nccl if ours is not None and nccl else None
    out["ratio_le_half"] = None if out["ratio_vs_nccl"] is None else \
        out["ratio_vs_nccl"] <= HOST_TARGET_RATIO
    return out


def target_lines(t: dict[str, Any], res: dict[str, Any]) -> list[str]:
    word = {True: "met", False: "MISSED"}
    lines = ["host-cost targets (median over M; per-rank median, max over ranks):"]
    if t["ours_host_us"] is None:
        return lines + ["  not measured (needs CUDA; on CPU every call is synchronous)"]
    lines.append(f"  ours {t['ours_host_us']:.2f} µs per eager call <= {HOST_TARGET_US:.0f} µs: "
                 f"{word[t['ours_le_5us']]}")
    if t["ratio_vs_nccl"] is None:
        lines.append(f"  ours vs NCCL all_gather_into_tensor: not measured ({res.get('ws1')})")
    else:
        lines.append(f"  ours / NCCL all_gather_into_tensor at world size 1 "
                     f"({t['nccl_ag_ws1_host_us']:.2f} µs) = {t['ratio_vs_nccl']:.2f} <= "
                     f"{HOST_TARGET_RATIO}: {word[t['ratio_le_half']]}")
    if t["stock_ws1_host_us"] is not None:
        lines.append(f"  (vLLM stock path at world size 1: {t['stock_ws1_host_us']:.2f} µs)")
    return lines


def finish(info: dict[str, Any], ctx: Any, results: list[dict[str, Any]]) -> None:
    from .plot import plot

    notes = mode_lines(info)
    for res in results:
        res["targets"] = targets(res)
        lines = [*_method_lines(res), "", *device_table(res, ctx.cuda)]
        if ctx.cuda and (ctx.cfg.host or ctx.cfg.graphs):
            lines += ["", *host_table(res)]
        elif not ctx.cuda:
            lines += ["", "host cost and CUDA-graph timing skipped: they need CUDA"]
        lines += ["", *target_lines(res["targets"], res)]
        print("\n".join(lines) + "\n")
    for line in notes:
        print(line)
    os.makedirs(ctx.cfg.out, exist_ok=True)
    stem = os.path.join(ctx.cfg.out, f"bench_tp{ctx.world}_{info['mode']}_{ctx.cfg.dtype}")
    doc = {"benchmark": "logits_gather.bench", "created": datetime.datetime.now().isoformat(
        timespec="seconds"), "machine": info, "config": ctx.cfg.as_dict(),
        "timer": "cuda_events" if ctx.cuda else "perf_counter", "notes": notes,
        "results": results}
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    print(f"wrote {stem}.json")
    print(plot(doc, stem + ".png"), flush=True)
