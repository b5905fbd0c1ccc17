"""How many rows a LogitsProcessor's LogitsGather gets, what that costs, and whether it fits.

Rows. The target model's ``compute_logits`` gets at most
``max_num_seqs * (1 + num_speculative_tokens)`` rows in a decode step (one per
request, plus one per draft token being verified). A drafter gets one row per
request per draft step, ``max_num_seqs``, or ``max_num_seqs *
num_speculative_tokens`` with parallel drafting (DFlash, DSpark, P-EAGLE).

Bytes. A LogitsGather of ``capacity`` rows holds ``slots x capacity x V_pad``
elements of symmetric memory (``V_pad`` = the padded vocabulary, ``tp x
columns``): 3 slots, 5 when it serves CUDA-graph captures. The default capacity
is the most rows that fit the byte budget ``memory_mib``, and never more than
the rows above; an explicit ``capacity`` replaces both.

Fit. Symmetric memory comes from the CUDA VMM, outside torch's caching
allocator. vLLM sizes its KV cache from ``cudaMemGetInfo`` around
``profile_run``, so a build there is counted; a build after the KV cache exists
takes memory from what vLLM leaves free. Every build therefore first checks
``torch.cuda.mem_get_info`` on every rank: it goes ahead only if each rank keeps
``min_free_mib`` free afterwards, and all ranks agree (see ``agree``) before
the collective construction.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..slots import slot_count

MIB = 1 << 20


def rows_from_config(vllm_config: Any, drafter: bool) -> int:
    """The most rows vLLM hands this ``compute_logits`` in one call (see module)."""
    seqs = int(vllm_config.scheduler_config.max_num_seqs)
    spec = getattr(vllm_config, "speculative_config", None)
    k = int(getattr(spec, "num_speculative_tokens", None) or 0) if spec is not None else 0
    if drafter:
        return seqs * (max(k, 1) if getattr(spec, "parallel_drafting", False) else 1)
    return seqs * (1 + k)


def row_bytes(padded_vocab: int, itemsize: int, graphs: bool) -> int:
    """Bytes of symmetric memory per row of capacity."""
    return slot_count(graphs) * padded_vocab * itemsize


def capacity_for(
    rows: int,
    budget_mib: float,
    padded_vocab: int,
    itemsize: int,
    graphs: bool,
    explicit: int | None = None,
) -> int:
    """``explicit`` if set, else ``min(rows, budget // row_bytes)`` (0: nothing fits)."""
    if explicit is not None:
        return explicit
    return min(rows, int(budget_mib * MIB) // row_bytes(padded_vocab, itemsize, graphs))


def device_free_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` as the CUDA driver sees it (None off CUDA)."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def fit_problem(device: torch.device, needed: int, min_free_mib: float) -> tuple[str | None, str]:
    """``(problem or None, what was seen)`` for allocating ``needed`` bytes here."""
    free = device_free_bytes(device)
    if free is None:
        return None, f"free memory not checked on {device.type}"
    seen = f"{free / MIB:.0f} MiB free before"
    if free - needed < min_free_mib * MIB:
        return (
            f"only {free / MIB:.0f} MiB free, {needed / MIB:.1f} MiB needed and "
            f"{min_free_mib:.0f} MiB must stay free (min_free_mib)"
        ), seen
    return None, seen


def agree(cpu_group: Any, mine: Any) -> list[Any]:
    """Every rank's ``mine``, through ``all_gather_object`` on vLLM's TP CPU
    (gloo) group: the plugin's decisions are taken from the same list on every
    rank, before any collective allocation."""
    if cpu_group is None or dist.get_world_size(cpu_group) == 1:
        return [mine]
    out: list[Any] = [None] * dist.get_world_size(cpu_group)
    dist.all_gather_object(out, mine, group=cpu_group)
    return out


__all__ = [
    "agree",
    "capacity_for",
    "device_free_bytes",
    "fit_problem",
    "row_bytes",
    "rows_from_config",
]
