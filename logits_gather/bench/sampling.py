"""python -m logits_gather.bench.sampling: our vocab-parallel sampler against vLLM's own.

Per op (greedy; temperature sample; min_p=0.05; top_k=50; top_p=0.9; top_k=50 with
top_p=0.9) and per M, interleaved in one run:

- ``ours``: our sampler on the ``[M, V/tp]`` shard;
- ``vllm``: the stock gather (NCCL all-gather + permute at tp > 1, nothing at tp = 1),
  then what vLLM's V2 sampler runs: the fp32 copy, ``apply_temperature``,
  ``apply_min_p``, ``apply_top_k_top_p_triton``, ``gumbel_sample``. Only when
  ``vllm`` imports (and on CPU only under ``TRITON_INTERPRET=1``); otherwise the run
  says why and goes on without it;
- ``torch``: the stock gather, then the torch ops vLLM runs without Triton.

Before timing, greedy tokens must be equal across methods, and no method may modify
its input; the other ops' token agreement with vLLM is printed (not asserted: the
definitions may differ). Timing follows the main benchmark: CUDA events over bursts
after a spin (``perf_counter`` on CPU), two passes, median per rank then max over
ranks, and CUDA-graph replay where a call captures. Ratios are ours / peer: lower is
better. The targets compare against vLLM's kernels. Files:
``sampling_tp{tp}_{placement}_bf16_V{V}.txt|.json|.png`` in ``--out``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .cli import UsageError
from .preflight import check_out

PROG = "python -m logits_gather.bench.sampling"
NVLS_OFF = {
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
}
GPU_ROWS, CPU_ROWS = [1, 4, 16, 64, 256], [1, 4, 16, 64]
GPU_VOCAB, CPU_VOCAB = 151552, 32768


def _ints(text: str) -> list[int]:
    try:
        rows = [int(m) for m in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError(f"values must be >= 1, got {text!r}")
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--tp", type=int, default=None, help="ranks (default: the GPU count; 2 on CPU)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--rows", type=_ints, default=None, help="M values (GPU 1,4,16,64,256; CPU 1,4,16,64)"
    )
    p.add_argument("--vocab", type=int, default=None, help="V (GPU 151552, CPU 32768)")
    p.add_argument("--quick", action="store_true", help="fewer, shorter bursts (smoke runs)")
    p.add_argument("--iters", type=int, default=None, help="calls per eager burst")
    p.add_argument("--no-graphs", dest="graphs", action="store_false", help="skip graph replay")
    p.add_argument("--out", default="bench-out", help="output directory (default ./bench-out)")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU is available here (use --device cpu)")
    gpus = torch.cuda.device_count() if gpu else 0
    if args.tp is None:
        args.tp = gpus if gpu else 2
    if args.tp < 1:
        p.error(f"--tp must be >= 1, got {args.tp}")
    if gpu and args.tp > gpus:
        p.error(f"--tp {args.tp} needs {args.tp} GPUs (one rank per GPU); {gpus} visible")
    args.rows = args.rows or (GPU_ROWS if gpu else CPU_ROWS)
    args.vocab = args.vocab or (GPU_VOCAB if gpu else CPU_VOCAB)
    if args.vocab < 1 or args.vocab % args.tp:
        p.error(f"--vocab {args.vocab} must be a positive multiple of --tp {args.tp}")
    if args.vocab // args.tp < 64:
        p.error(f"--vocab {args.vocab}: each rank needs at least 64 columns for top_k=50")
    args.iters = args.iters or ((5 if args.quick else 20) if gpu else 2)
    args.graph_calls, args.replays = 4, (5 if args.quick else 10)
    args.graphs = args.graphs and gpu
    try:
        check_out(args.out)
    except UsageError as exc:
        p.error(str(exc))
    return args


def _kernels(device: str) -> tuple[Any, str]:
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return None, "vLLM's Triton kernels need a GPU here (or TRITON_INTERPRET=1 on CPU)"
    from .sampling_peers import vllm_kernels

    return vllm_kernels()


def _setup(args: argparse.Namespace, world: int, unavailable: dict[str, str]) -> dict[str, Any]:
    gpu = args.device == "cuda"
    placement = f"{world}gpu" if gpu else "cpu"
    where = f"sampling, tp={world}, {placement}, V={args.vocab}, bf16" + (
        f", {torch.cuda.get_device_name()}" if gpu else ", gloo ranks: says nothing about GPUs"
    )
    return {
        "where": where,
        "device": args.device,
        "tp": world,
        "vocab": args.vocab,
        "rows": args.rows,
        "iters": args.iters,
        "graphs": args.graphs,
        "methods": ["ours", "torch"] + ([] if unavailable else ["vllm"]),
        "unavailable": unavailable,
        "stem": f"sampling_tp{world}_{placement}_bf16_V{args.vocab}",
        "target_note": ""
        if (gpu and world == 1 and args.vocab == GPU_VOCAB)
        else "targets are for one H200, tp=1, V=151552",
    }


def _worker(rank: int, world: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(NVLS_OFF, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpu = args.device == "cuda"
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world)
    from .sampling_report import report
    from .sampling_run import worker

    kernels, why = _kernels(args.device)
    if rank == 0 and kernels is None:
        print(f"peer vllm unavailable, going on without it: {why}", flush=True)
    result = worker(rank, world, args, kernels)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, result)
    failed = False
    if rank == 0:
        unavailable = {} if kernels is not None else {"vllm": why}
        text, doc = report(_setup(args, world, unavailable), everyone, args.rows, args.out)
        print(text, flush=True)
        failed = bool(doc["problems"])
    dist.barrier()
    if gpu:
        torch.cuda.synchronize()
    sys.stdout.flush()
    sys.stderr.flush()
    # Every rank skips teardown once the report is written: tearing down captured graphs
    # and NCCL once hung after the table, and gloo's teardown now and then aborted rank 1
    # (SIGABRT) when rank 0's sockets closed first.
    os._exit(1 if failed else 0)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.start_processes(
            _worker, args=(args.tp, args, port), nprocs=args.tp, start_method="spawn"
        )
    except mp.ProcessExitedException as exc:
        print(f"{PROG}: a rank failed ({exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
