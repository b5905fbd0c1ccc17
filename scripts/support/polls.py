"""A check of compiled fused kernels (a test aid): no poll loop that one warp can leave alone.

A multi-warp reader whose readiness test is decided per warp lets its warps leave the
wait at different polls; they then meet different ``bar.sync`` instructions and the
kernel computes from partials of different steps (:mod:`.exchange`, "Uniform polls"). In the
PTX such a loop is a loop header with volatile loads whose first conditional branch
comes before any ``bar.sync``. ``tests/sampling/test_polls_compile.py``,
``scripts/sampling-compile-check.py`` and ``scripts/sampling-poll-sweep.py`` run it on
compiled kernels.
"""

from __future__ import annotations

import re
from typing import Any

_BLOCK = re.compile(r"\n(?=\$L__BB)")
_BRANCH = re.compile(r"@%p\d+ bra")


def warp_local_polls(ptx: str) -> list[str]:
    """Labels of poll-loop headers (loop headers with volatile loads) whose first
    conditional branch, the readiness test, comes before any ``bar.sync``."""
    bad = []
    for block in _BLOCK.split(ptx):
        if "ld.volatile" not in block or "Loop Header" not in "".join(block.split("\n", 2)[:2]):
            continue
        branch = _BRANCH.search(block)
        if branch and "bar.sync" not in block[: branch.start()]:
            bad.append(block.split(":", 1)[0])
    return bad


def check(compiled: Any, name: str, warps: int) -> None:
    """Raises RuntimeError if ``compiled`` (a Triton CompiledKernel of ``warps`` warps)
    has a poll loop that one warp can leave alone; a no-op without PTX (the interpreter,
    stand-ins)."""
    asm = getattr(compiled, "asm", None)
    ptx = asm.get("ptx") if isinstance(asm, dict) else None
    if warps <= 1 or not isinstance(ptx, str):
        return
    bad = warp_local_polls(ptx)
    if bad:
        raise RuntimeError(
            f"logits_gather.sampling: the compiled {name} ({warps} warps) has a poll loop "
            f"whose readiness test one warp decides alone (PTX {', '.join(bad)}), so it "
            "could return wrong tokens"
        )


__all__ = ["check", "warp_local_polls"]
