"""The command line of ``python -m logits_gather.bench`` (the gather benchmark and
``--head``): the arguments, the ``--quick`` defaults and their validation; the
:class:`UsageError` and the list parser every benchmark's command line uses."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEFAULT_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
METHODS = ("stock", "nccl_symm", "ce_pull", "ours", "ours_checked", "limit")
DEFAULT_METHODS = ("stock", "nccl_symm", "ce_pull", "ours", "limit")
TIMED = tuple(m for m in METHODS if m != "limit")

# knob: (full run, --quick run)
KNOBS: dict[str, tuple[Any, Any]] = {
    "bursts": (5, 3),  # timed bursts per method, M and pass
    "iters": (50, 20),  # at most this many calls per burst
    "budget_ms": (20.0, 4.0),  # aim a burst at this much device time
    "warmup": (5, 3),  # untimed calls before each method's first burst at an M
    "host_calls": (100, 40),  # calls per host-cost measurement
    "replays": (10, 3),  # graph replays per burst
    "limit_mib": (64, 16),  # egress per rank of the peer-bandwidth probe
}


class UsageError(ValueError):
    """Bad command line; printed without a traceback, exit code 2."""


@dataclass(frozen=True)
class BenchConfig:
    tp: int | None
    rows: tuple[int, ...]
    vocabs: tuple[int, ...]
    dtype: str
    methods: tuple[str, ...]
    out: str
    bursts: int
    iters: int
    budget_ms: float
    warmup: int
    host_calls: int
    replays: int
    limit_mib: int
    sets: int
    graph_calls: int
    graphs: bool
    host: bool
    colocate: bool
    ranks_per_gpu: int | None
    ours_backend: str
    nccl_symm_route: str
    stall_timeout: float
    seed: int
    quick: bool
    fail_rank: int | None = None
    head: int | None = None  # --head H: the LM-head benchmark (bench/lm_head/) instead

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def capacity(self) -> int:
        return max(self.rows)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def int_list(text: str, flag: str) -> tuple[int, ...]:
    """``"1,4,16"`` as ``(1, 4, 16)``: every benchmark's list options go through here."""
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise UsageError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} must list positive integers, got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m logits_gather.bench",
        description="Times LogitsGather against vLLM's stock all-gather, NCCL symmetric kernels "
        "and torch's copy-engine all-gather, interleaved in one run.",
    )
    p.add_argument(
        "--tp",
        type=int,
        default=None,
        help="ranks (default: all visible GPUs; 2 on one GPU or on CPU)",
    )
    p.add_argument(
        "--rows", default=",".join(map(str, DEFAULT_ROWS)), help="list of M (default %(default)s)"
    )
    p.add_argument(
        "--vocab",
        default="151552",
        help="list of vocab sizes V, each divisible by tp (default %(default)s)",
    )
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help="subset of " + ",".join(METHODS) + " (default %(default)s; ours_checked: "
        "LogitsGather(check_calls=True), to state the cost of call checks)",
    )
    p.add_argument(
        "--out",
        default="bench-out",
        help="directory for the table (.txt), JSON and PNG (checked before the run)",
    )
    p.add_argument("--quick", action="store_true", help="fewer, shorter bursts (smoke runs)")
    for knob, (full, quick) in KNOBS.items():
        p.add_argument(
            "--" + knob.replace("_", "-"),
            type=type(full),
            default=None,
            help=f"default {full}, {quick} with --quick",
        )
    p.add_argument("--sets", type=int, default=4, help="input sets rotated between calls")
    p.add_argument("--graph-calls", type=int, default=8, help="calls captured per CUDA graph")
    p.add_argument(
        "--no-graphs", dest="graphs", action="store_false", help="skip CUDA-graph replay timing"
    )
    p.add_argument("--no-host", dest="host", action="store_false", help="skip host-cost timing")
    p.add_argument(
        "--colocate",
        action="store_true",
        help="put every rank on cuda:0 even when several GPUs are visible (latency only)",
    )
    p.add_argument(
        "--ranks-per-gpu",
        type=int,
        default=None,
        metavar="R",
        help="R ranks per GPU, rank r on GPU r %% (tp/R): exercises tp above the GPU "
        "count with real cross-GPU flags; gloo process group, no stock or "
        "nccl_symm; LATENCY ONLY (start an MPS daemon first)",
    )
    p.add_argument(
        "--ours-backend", default="auto", choices=("auto", "symm_mem", "torch.distributed")
    )
    p.add_argument(
        "--nccl-symm-route",
        default="mempool",
        choices=("mempool", "symm_mem"),
        help="how nccl_symm gets NCCL-window memory (see the package docstring)",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=300.0,
        help="seconds without progress from a rank before the run is killed",
    )
    p.add_argument(
        "--head",
        type=int,
        default=None,
        metavar="H",
        help="benchmark the LM head plus the gather instead, at hidden size H (random "
        "[V/tp, H] weights per rank): cublas+stock, cublas+ours, fused "
        "(LogitsGather.linear) and head alone; --tp 1 allowed",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fail-rank", type=int, default=None, help=argparse.SUPPRESS)
    return p


def parse(argv: list[str] | None = None) -> BenchConfig:
    a = parser().parse_args(argv)
    methods = tuple(m for m in a.methods.replace(" ", "").split(",") if m)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UsageError(f"--methods must be a subset of {','.join(METHODS)}, got {a.methods!r}")
    if not any(m in TIMED for m in methods):
        raise UsageError(
            f"--methods {a.methods} times nothing: name at least one of "
            f"{','.join(TIMED)} (limit alone is only a ceiling for them)"
        )
    if a.ranks_per_gpu is not None and a.ranks_per_gpu < 1:
        raise UsageError(f"--ranks-per-gpu must be positive, got {a.ranks_per_gpu}")
    knobs = {
        k: (getattr(a, k) if getattr(a, k) is not None else v[a.quick]) for k, v in KNOBS.items()
    }
    for name, value in {**knobs, "sets": a.sets, "graph_calls": a.graph_calls}.items():
        if value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if a.head is not None and a.head < 1:
        raise UsageError(f"--head must be a positive hidden size H, got {a.head}")
    if a.tp is not None and a.tp < (1 if a.head is not None else 2):
        if a.tp < 1:
            raise UsageError(f"--tp must be positive, got {a.tp}")
        raise UsageError(
            f"--tp must be at least 2 (a gather over one rank is a no-op; --head H allows "
            f"--tp 1), got {a.tp}"
        )
    if a.stall_timeout <= 0:
        raise UsageError(f"--stall-timeout must be positive, got {a.stall_timeout}")
    rows = tuple(sorted(set(int_list(a.rows, "--rows"))))
    vocabs = tuple(dict.fromkeys(int_list(a.vocab, "--vocab")))
    return BenchConfig(
        tp=a.tp,
        rows=rows,
        vocabs=vocabs,
        dtype=a.dtype,
        methods=tuple(m for m in METHODS if m in methods),
        out=a.out,
        sets=a.sets,
        graph_calls=a.graph_calls,
        graphs=a.graphs,
        host=a.host,
        colocate=a.colocate,
        ranks_per_gpu=a.ranks_per_gpu,
        ours_backend=a.ours_backend,
        nccl_symm_route=a.nccl_symm_route,
        stall_timeout=a.stall_timeout,
        seed=a.seed,
        quick=a.quick,
        fail_rank=a.fail_rank,
        head=a.head,
        **knobs,
    )


def check_divisible(vocabs: tuple[int, ...], tp: int) -> None:
    bad = [v for v in vocabs if v % tp]
    if bad:
        raise UsageError(
            f"--vocab {','.join(map(str, bad))} is not divisible by --tp {tp}: every "
            f"rank holds vocab/tp columns (e.g. {bad[0]} % {tp} = {bad[0] % tp})"
        )
