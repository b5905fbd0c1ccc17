"""``LogitsGather.linear``'s host side: argument checks, call check, route and dispatch.

:class:`HeadLinear` is built by ``LogitsGather`` at the first ``linear`` call from the
object's public facts plus three callables it owns: ``gather`` (its ``__call__``
implementation), ``check_call`` (its collective call check, or None) and ``guard``
(runs a launch, turning a kernel's timeout into ``PeerTimeoutError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..checks import agree, on_device
from .checks import aligned, linear_error
from .route import HeadRoute, kernel_problem


class HeadLinear:
    """``self(hidden, weight, fused)``: what ``LogitsGather.linear`` returns."""

    def __init__(
        self,
        *,
        group: Any,
        world_size: int,
        backend: str,
        columns: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
        graphs: bool,
        gather: Callable[[torch.Tensor], torch.Tensor],
        check_call: Callable[..., None] | None,
        guard: Callable[..., torch.Tensor],
    ) -> None:
        self._columns, self._capacity, self._dtype, self._device = columns, capacity, dtype, device
        self._gather, self._check_call, self._guard = gather, check_call, guard
        kernel = kernel_problem(world_size=world_size, backend=backend, device=device)

        def agree_failure(failure: str | None) -> list[str | None]:
            with on_device(device):
                return agree(group, {"step": "fused head compile"}, [], extra=failure)

        self.route = HeadRoute(
            slots=gather if world_size > 1 and kernel is None else None,
            kernel=kernel,
            columns=columns,
            capacity=capacity,
            dtype=dtype,
            device=device,
            graphs=graphs,
            agree=agree_failure,
        )

    def __call__(
        self, hidden: torch.Tensor, weight: torch.Tensor, fused: bool | None
    ) -> torch.Tensor:
        problem = linear_error(
            hidden,
            weight,
            fused,
            columns=self._columns,
            capacity=self._capacity,
            dtype=self._dtype,
            device=self._device,
        )
        if self._check_call is not None:
            op = (
                0
                if problem is not None
                else hidden.shape[1] * 4 + (fused is None) + 2 * bool(fused)
            )
            # collective: the same error on every rank
            self._check_call(hidden, problem is None, error=problem, op=op)
        elif problem is not None:
            raise problem
        tile = self.route.choose(hidden.shape[0], hidden.shape[1], fused)
        with torch.no_grad():
            if tile is None:
                return self._guard(self._gather, torch.nn.functional.linear(hidden, weight))
            x, w = aligned(hidden.detach(), "hidden"), aligned(weight.detach(), "weight")
            return self._guard(self.route.fused, x, w, tile)
