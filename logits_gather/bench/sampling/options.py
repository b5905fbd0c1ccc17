"""The command line of ``python -m logits_gather.bench.sampling``: the arguments, their
defaults per device and their validation, then the ranks (``bench/ranks.py``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from ..cli import UsageError, int_list
from ..plan import NVLS_OFF
from ..preflight import check_out
from ..ranks import spawn
from .profiles import PROFILES
from .run import run

PROG = "python -m logits_gather.bench.sampling"
# CPU: a harness check that stays under 2 minutes on 2 cores (docs/benchmarking.md)
GPU_ROWS, CPU_ROWS = [1, 4, 16, 64, 256], [1, 4, 16]
GPU_VOCAB, CPU_VOCAB = 151552, 32768
GPU_PROFILES, CPU_PROFILES = PROFILES, ("peaked", "mixed")


@dataclass(frozen=True)
class SamplingConfig:
    tp: int
    device: str  # "cuda" | "cpu"
    rows: list[int]
    profiles: tuple[str, ...]
    vocab: int
    quick: bool
    iters: int  # calls per eager burst
    graphs: bool
    graph_calls: int
    replays: int
    out: str


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=f"{PROG}: our vocab-parallel sampler against vLLM's own."
    )
    p.add_argument("--tp", type=int, default=None, help="ranks (default: the GPU count; 2 on CPU)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--rows", default=None, help="M values (GPU 1,4,16,64,256; CPU 1,4,16)")
    p.add_argument("--vocab", type=int, default=None, help="V (GPU 151552, CPU 32768)")
    p.add_argument(
        "--profiles",
        default=None,
        help=f"logits profiles, a subset of {','.join(PROFILES)} (default: GPU all, "
        f"CPU {','.join(CPU_PROFILES)}; see bench/sampling/profiles.py)",
    )
    p.add_argument("--quick", action="store_true", help="fewer, shorter bursts (smoke runs)")
    p.add_argument("--iters", type=int, default=None, help="calls per eager burst")
    p.add_argument("--no-graphs", dest="graphs", action="store_false", help="skip graph replay")
    p.add_argument("--out", default="bench-out", help="output directory (default ./bench-out)")
    return p


def _settle(a: argparse.Namespace) -> SamplingConfig:
    """The validated configuration, or a UsageError."""
    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device == "cuda"
    if gpu and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is available here (use --device cpu)")
    gpus = torch.cuda.device_count() if gpu else 0
    tp = a.tp if a.tp is not None else gpus if gpu else 2
    if tp < 1:
        raise UsageError(f"--tp must be >= 1, got {tp}")
    if gpu and tp > gpus:
        raise UsageError(f"--tp {tp} needs {tp} GPUs (one rank per GPU); {gpus} visible")
    rows = list(int_list(a.rows, "--rows")) if a.rows is not None else None
    vocab = a.vocab or (GPU_VOCAB if gpu else CPU_VOCAB)
    if vocab < 1 or vocab % tp:
        raise UsageError(f"--vocab {vocab} must be a positive multiple of --tp {tp}")
    if vocab // tp < 64:
        raise UsageError(f"--vocab {vocab}: each rank needs at least 64 columns for top_k=50")
    names = (
        a.profiles if a.profiles is not None else ",".join(GPU_PROFILES if gpu else CPU_PROFILES)
    )
    chosen = tuple(dict.fromkeys(p for p in names.replace(" ", "").split(",") if p))
    bad = [p for p in chosen if p not in PROFILES]
    if bad or not chosen:
        raise UsageError(f"--profiles must list some of {','.join(PROFILES)}, got {names!r}")
    check_out(a.out)
    return SamplingConfig(
        tp=tp,
        device=device,
        rows=rows or (GPU_ROWS if gpu else CPU_ROWS),
        profiles=chosen,
        vocab=vocab,
        quick=a.quick,
        iters=a.iters or ((5 if a.quick else 20) if gpu else 2),
        graphs=a.graphs and gpu,
        graph_calls=4,
        replays=5 if a.quick else 10,
        out=a.out,
    )


def parse(argv: list[str] | None = None) -> SamplingConfig:
    """The configuration; a bad command line exits with code 2 and the usage."""
    p = parser()
    try:
        return _settle(p.parse_args(argv))
    except UsageError as exc:
        p.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    cfg = parse(argv)
    # Every rank skips teardown once the report is written (hard_exit): tearing down
    # captured graphs and NCCL can hang after the table, and gloo's teardown can abort
    # a rank (SIGABRT) when rank 0's sockets close first.
    return spawn(
        run,
        (cfg,),
        world=cfg.tp,
        env=NVLS_OFF,
        stall_s=None,
        what=f"{cfg.tp} ranks, sampling on {cfg.device}",
        hard_exit=True,
    )
