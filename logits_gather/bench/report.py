"""What every benchmark's report shares: the preamble, the mode lines, table cells, and
the JSON and text files (rank 0). The gather benchmark's tables: ``gather/report.py``."""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

from .plan import LATENCY_ONLY


def mode_lines(info: dict[str, Any]) -> list[str]:
    tp, mode = info["tp"], info["mode"]
    if mode == "cpu":
        return [
            f"mode: CPU, {tp} gloo ranks (no GPU is visible).",
            "!! These are gloo-over-loopback timings: they say nothing about GPUs or NVLink.",
        ]
    if mode == "nccl":
        return [f"mode: {tp} GPUs, one rank per GPU, NCCL process group."]
    per, used = info.get("ranks_per_gpu"), info.get("gpus_used")
    if mode == "colocated":
        lines = [
            f"mode: COLOCATED, {tp} processes share one GPU (cuda:0), gloo process group.",
            "!! LATENCY ONLY. These timings say nothing about NVLink: every 'peer' store "
            "is a write to the same GPU's memory, and the ranks' kernels compete for one "
            "GPU's SMs.",
        ]
    else:
        lines = [
            f"mode: SPREAD, {tp} ranks over {used} GPUs ({per} per GPU, rank r on GPU "
            f"r % {used}), gloo process group (NCCL refuses several ranks per GPU).",
            "!! " + LATENCY_ONLY.format(tp=tp) + ". Flags do cross GPUs; bandwidth does "
            "not scale like tp=" + str(tp) + ".",
        ]
    if not info.get("mps_pipe"):
        lines.append(
            "!! No MPS daemon found: the ranks' kernels are time-sliced, so a call "
            "can take milliseconds (start one with `nvidia-cuda-mps-control -d`)."
        )
    return lines


def preamble_lines(info: dict[str, Any], ctx: Any) -> list[str]:
    cfg = ctx.cfg
    gpu = f"{info['gpu_count']}x {info['gpu_name']}" if info.get("gpu_name") else "no GPU"
    vocabs, rows = ",".join(map(str, cfg.vocabs)), ",".join(map(str, cfg.rows))
    parts = (
        [gpu]
        + [f"{k} {info[k]}" for k in ("driver", "torch", "triton", "nccl") if info.get(k)]
        + [f"host {info['hostname']}"]
    )
    return [
        f"logits_gather benchmark: tp={info['tp']}, {cfg.dtype}, V={vocabs}, M={rows}"
        + (" (--quick)" if cfg.quick else ""),
        "machine: " + ", ".join(parts),
        *mode_lines(info),
        "",
    ]


def preamble(info: dict[str, Any], ctx: Any) -> None:
    print("\n".join(preamble_lines(info, ctx)), flush=True)


def num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def cell(entry: dict[str, Any] | None, status: dict[str, Any] | None = None) -> str:
    """A timing as ``median ±spread%``, or why there is none."""
    if entry is None or entry.get("status", "ok") != "ok":
        st = (entry or status or {}).get("status")
        return "WRONG" if st == "WRONG" else "n/a"
    spread = entry.get("spread_pct")
    return num(entry["median"]) + (f" ±{spread:.0f}%" if spread is not None else "")


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return [line(head), "-+-".join("-" * w for w in widths), *map(line, rows)]


def write(
    base: str,
    benchmark: str,
    info: dict[str, Any],
    ctx: Any,
    cfg: Any,
    notes: list[str],
    results: list[dict[str, Any]],
    text: list[str],
    plot: Any,
) -> None:
    """Write ``base``.json, .txt and .png: one benchmark's results, its machine and config."""
    os.makedirs(cfg.out, exist_ok=True)
    doc = {
        "benchmark": benchmark,
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": info,
        "config": cfg.as_dict(),
        "timer": "cuda_events" if ctx.cuda else "perf_counter",
        "notes": notes,
        "latency_only": info["latency_only"],
        "results": results,
    }
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    with open(base + ".txt", "w") as f:
        f.write("\n".join([*preamble_lines(info, ctx), *text, *notes]) + "\n")
    print(f"wrote {base}.json and {base}.txt")
    print(plot(doc, base + ".png"), flush=True)
