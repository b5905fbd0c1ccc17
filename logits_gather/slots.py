"""Which output slot a call writes: the one slot rotation of the push gather, shared by the
fused LM head (one of its calls is one call of the protocol) and sized by the vLLM plugin.

Eager calls rotate over ``EAGER_SLOTS`` slots, so call ``k``'s result stays valid until
call ``k + 2`` is issued (the push kernel's barrier orders call ``k + 1`` after every
rank read call ``k - 1``'s slot; ``kernel.py`` says why three). Captured calls alternate
over ``GRAPH_SLOTS`` slots of their own, so a graph's replays never write a slot that an
eager call's result still lives in. Imports no Triton.
"""

from __future__ import annotations

import torch

EAGER_SLOTS = 3
GRAPH_SLOTS = 2

_capturing = torch._C._cuda_isCurrentStreamCapturing


def slot_count(graphs: bool) -> int:
    """Slots an object needs: the eager ones, plus the graph ones when it can be captured."""
    return EAGER_SLOTS + (GRAPH_SLOTS if graphs else 0)


class SlotRotation:
    """The next slot of an object's calls: ``take()`` during capture alternates the graph
    slots, otherwise it rotates the eager ones. ``eager`` is the slot the next eager call
    takes (tests poison it)."""

    def __init__(self, *, graphs: bool = True, owner: str = "LogitsGather") -> None:
        self.graphs = graphs
        self.owner = owner
        self.eager = 0
        self._captured = 0

    def take(self) -> int:
        if _capturing():
            if not self.graphs:
                raise RuntimeError(
                    f"this {self.owner} was built with graphs=False; build it with "
                    "graphs=True to call it during CUDA graph capture"
                )
            slot = EAGER_SLOTS + (self._captured & 1)
            self._captured += 1
            return slot
        slot = self.eager
        self.eager = (slot + 1) % EAGER_SLOTS
        return slot


__all__ = ["EAGER_SLOTS", "GRAPH_SLOTS", "SlotRotation", "slot_count"]
