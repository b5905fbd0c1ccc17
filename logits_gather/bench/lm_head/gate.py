"""``--head``'s inputs, and its correctness gate before any timing: every method at every M.

Per rank a random ``[V/tp, H]`` weight, seeded by rank and generated on the device, so
that any rank can rebuild any rank's; ``--sets`` hidden states shared by every rank.

* ``cublas+stock`` and ``cublas+ours`` equal, bit for bit, ``torch.cat`` of every rank's
  ``F.linear`` (each rank rebuilds every rank's weight from the seed);
* ``head alone`` equals this rank's block of it;
* ``fused`` equals it bit for bit where ``linear`` routes the call to cuBLAS, and
  where it takes the fused kernel it stays within bf16 GEMM tolerance of an fp32
  reference: relative error (Frobenius) at most ``2 x`` cuBLAS's own ``+ 1e-4``, and
  below ``1e-2``;
* every gathered result is bit-identical on every rank (SHA-256 of its bytes).

A method that fails is reported WRONG (or unavailable, if it raised) and the run
times nothing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..gather.inputs import check

GATHERED = ("cublas+stock", "cublas+ours", "fused")


def weight_of(rank: int, *, seed: int, columns: int, hidden: int, dtype, device) -> torch.Tensor:
    """Rank ``rank``'s ``[columns, H]`` slice: any rank can rebuild any rank's."""
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + 7919 * (rank + 1))
    w = torch.randn((columns, hidden), generator=gen, device=device, dtype=torch.float32)
    return (w * hidden**-0.5).to(dtype)


def hidden_sets(*, seed: int, sets: int, capacity: int, hidden: int, dtype, device) -> list:
    """``sets`` hidden states ``[capacity, H]``, the same on every rank."""
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + 17)
    return [
        torch.randn((capacity, hidden), generator=gen, device=device, dtype=torch.float32).to(dtype)
        for _ in range(sets)
    ]


def _digest(t: torch.Tensor) -> str:
    raw = t.detach().contiguous().cpu().view(torch.uint8)
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def check_all(
    ctx: Any,
    calls: dict[str, Callable],
    x: torch.Tensor,
    weight: torch.Tensor,
    columns: int,
    paths: dict[int, str],
    make: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    rows = ctx.cfg.rows
    outs: dict[str, dict[int, torch.Tensor]] = {name: {} for name in calls}
    problems: dict[str, str | None] = {name: None for name in calls}
    for name, call in calls.items():  # the same collective calls, in order, on every rank
        ctx.beat(f"check {name}")  # a heartbeat per step: a slow CPU gate is not a stall
        for m in rows:
            try:
                outs[name][m] = call(x[:m]).clone()
            except Exception as exc:  # noqa: BLE001 - the method is unavailable, not the run
                problems[name] = problems[name] or f"M={m} raised {type(exc).__name__}: {exc}"
    ctx.sync()
    errs = {m: [0.0, 0.0, 0.0] for m in rows}  # fused, cuBLAS, reference: squared norms
    for r in range(ctx.world):
        ctx.beat(f"check against rank {r}'s weight")
        w = weight if r == ctx.rank else weight_of(r, columns=columns, **make)
        cols = slice(r * columns, (r + 1) * columns)
        for m in rows:
            want = F.linear(x[:m], w)
            for name in calls:
                out = outs[name].get(m)
                if out is None or problems[name]:
                    continue
                if name == "head alone":
                    diff = check(out, want) if r == ctx.rank else None
                elif name == "fused" and paths[m].startswith("fused"):
                    ref = x[:m].float() @ w.float().T
                    got = out[:, cols].float()
                    e = errs[m]
                    e[0] += float((got - ref).square().sum())
                    e[1] += float((want.float() - ref).square().sum())
                    e[2] += float(ref.square().sum())
                    diff = None
                else:
                    diff = check(out[:, cols], want)
                if diff:
                    problems[name] = f"M={m}, columns of rank {r}: {diff}"
        del w
    rel = {}
    for m in rows:
        if paths[m].startswith("fused") and not problems["fused"]:
            ours, cublas = (math.sqrt(e / max(errs[m][2], 1e-30)) for e in errs[m][:2])
            rel[m] = {"fused": ours, "cublas": cublas}
            if not (ours <= 2 * cublas + 1e-4 and ours < 1e-2):
                problems["fused"] = (
                    f"M={m}: relative error {ours:.2e} against an fp32 reference, "
                    f"cuBLAS's is {cublas:.2e}"
                )
    digests = {n: {m: _digest(t) for m, t in outs[n].items()} for n in GATHERED if n in outs}
    everyone = ctx.gather((problems, digests))
    status = {}
    for name in calls:
        bad = [f"rank {r}: {p[name]}" for r, (p, _) in enumerate(everyone) if p[name]]
        if (
            name in digests
            and not bad
            and any(d[name] != everyone[0][1][name] for _, d in everyone)
        ):
            bad = ["results differ between ranks (SHA-256 of the bytes)"]
        if bad:
            kind = "unavailable" if all("raised" in b for b in bad) else "WRONG"
            status[name] = {"status": kind, "reason": "; ".join(bad)}
        else:
            status[name] = {"status": "ok"}
    if rel:
        status["fused"]["relative_error"] = rel
    return status
