"""``python -m logits_gather.bench``: LogitsGather against the all-gathers it replaces.

Three benchmarks share one core; each lives in its own subpackage (a wing):

* ``python -m logits_gather.bench``: the gather benchmark (``gather/``; its methods,
  limit, timing protocol and traps are in ``gather/__init__.py``);
* ``python -m logits_gather.bench --head H``: the LM head plus the gather
  (``lm_head/``);
* ``python -m logits_gather.bench.sampling``: the vocab-parallel sampler against
  vLLM's (``sampling/``).

The core: ``cli.py`` (the arguments of ``python -m logits_gather.bench``),
``plan.py`` (placement and each rank's environment), ``preflight.py`` (checks before
any rank starts), ``ranks.py`` (the one rank launcher of every benchmark),
``worker.py`` (one rank of ``python -m logits_gather.bench``), ``timing.py`` (the
clocks), ``report.py`` (what every report shares), ``machine.py``, ``plot.py`` and
``progress.py``. :func:`main` below ties the command together.

Runs and placement (``plan.py``)
--------------------------------
The command starts its own ranks (``--tp`` picks how many; default: every visible
GPU). Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set) each process is one rank
and nothing is spawned. Every rank runs with NVLink multicast off
(``TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1``).

* One rank per GPU, NCCL process group: the only placement whose figures are tp=N
  figures.
* ``--ranks-per-gpu R``: rank r on GPU ``r % G`` with ``G = tp / R`` (tp above the GPU
  count, e.g. ``--tp 8 --ranks-per-gpu 4`` on 2 GPUs). The process group is gloo
  (NCCL refuses several ranks per GPU, so ``stock`` and ``nccl_symm`` are reported
  unavailable) and ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` is set. Flags
  cross real links, but the ranks share SMs and links: the table, the JSON
  (``latency_only``) and the file names say LATENCY ONLY. Start an MPS daemon first
  (``scripts/multi-gpu-run.sh`` does), or the ranks' kernels time-slice.
* ``--colocate`` (or a single visible GPU): every rank on cuda:0, the same with G=1.
* No GPU: gloo ranks on the CPU.

A quick smoke: ``python -m logits_gather.bench --tp 2 --rows 1,64 --quick``.
Before any rank starts, the parent checks that ``--out`` is writable and that the
estimated memory fits (``preflight.py``); bad arguments exit with code 2.
Outputs: ``bench_tp{tp}_{placement}_{dtype}_V{V1-V2...}.{txt,json,png}`` in ``--out``
(placement ``2gpu``, ``2gpu-4pergpu-latency-only``, ``1gpu-2pergpu-latency-only``,
``cpu``): the printed tables, everything measured, the plot.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """``python -m logits_gather.bench``: parse, place the ranks, check, start them."""
    import sys

    from . import ranks, worker
    from .cli import UsageError, parse
    from .plan import plan_ranks, rank_env
    from .preflight import check_memory, check_out

    try:
        cfg = parse(argv)
        plan = plan_ranks(cfg)
        check_out(cfg.out)
        check_memory(cfg, plan)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = rank_env(plan)
    if plan.torchrun:
        return ranks.in_process(worker.run, (cfg, plan), env)
    return ranks.spawn(
        worker.run,
        (cfg, plan),
        world=plan.tp,
        env=env,
        stall_s=cfg.stall_timeout,
        what=f"{plan.tp} ranks, {plan.mode}",
    )


__all__ = ["main"]
