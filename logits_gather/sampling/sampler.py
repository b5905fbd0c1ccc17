"""VocabParallelSampler, and which path serves each call.

Without the fused kernels (no Triton, CPU, ``fused=False`` or
``LOGITS_GATHER_SAMPLING_TORCH=1``) every call takes the torch-ops path (:mod:`.exact`).
On the fused path (:mod:`.fused`), ``sample`` routes by its filters, after dropping
scalars that are off (``top_k`` 0 or >= V, ``top_p >= 1``, ``min_p <= 0``):

| filters | path |
|---|---|
| none | :meth:`.fused.fused.Fused.sample` |
| ``min_p`` alone | :meth:`.fused.fused.Fused.sample_minp` |
| an int ``top_k <= 64`` (and ``top_p``, ``min_p``) | :meth:`.fused.fused.Fused.sample_topk` |
| ``top_p``, a larger or per-row ``top_k`` (and ``min_p``) | :func:`.fused.cuts.sample` |

The last row's candidate rounds leave some rows undecided; an exact in-kernel fallback
finishes them in the same launch sequence (:mod:`.fused.cuts`), so every fused call is
sync-free and CUDA graphs capture it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..checks import agree, on_device, resolve_device, resolve_options
from . import checks
from .agreement import GREEDY, LOGPROBS, SAMPLE, Agreement, collective, settle
from .exact import filters, ops
from .exact.filters import MAX_CANDIDATES
from .fused import cuts, mailbox, policy
from .fused.plans import dense
from .reference import Logprobs
from .state import State


class VocabParallelSampler:
    """Greedy, sample and logprobs on ``[M, columns]`` vocab shards (rank ``r`` holds the
    global columns ``r * columns ..``). Arguments in :class:`~logits_gather.LogitsGather`'s
    order and meaning; ``timeout_s``/``on_timeout`` bound the fused kernels' waits.

    Construction is collective over ``group`` and checked: every rank must pass the same
    ``columns``, ``capacity`` and options, or every rank raises the same ``ValueError``
    naming each rank's value. So is the first call with a new ``top_k`` size, filter kind,
    ``top_n`` or a larger ``M``: every rank makes the same calls, and runs each variant
    once before capturing a CUDA graph. The fused kernels serve CUDA with Triton when
    every GPU maps its peers' memory and there are at most 4 ranks; ``fused=False``
    forces the torch-ops path. ``check_values=False`` skips the value checks (a host sync
    per call). ``check_calls`` (default ``$LOGITS_GATHER_CHECK_CALLS`` or off) verifies
    before every call that all ranks make the same call with the same arguments
    (:mod:`.agreement`), and raises the same ``ValueError`` everywhere if not.
    """

    def __init__(
        self,
        columns: int,
        capacity: int,
        device: torch.device | str | int | None = None,
        group: dist.ProcessGroup | None = None,
        *,
        backend: str = "auto",
        timeout_s: float | None = None,
        on_timeout: str | None = None,
        check_values: bool = True,
        fused: bool = True,
        check_calls: bool | None = None,
    ) -> None:
        self.world_size: int = checks.world(group, "VocabParallelSampler")
        problems = checks.construction_problems(columns, capacity, backend)
        device, more = resolve_device(device)
        talk_on = device if not more else resolve_device(None)[0]
        timeout_s, on_timeout, check_calls, options = resolve_options(
            timeout_s, on_timeout, check_calls
        )
        record = dict(
            columns=columns,
            capacity=capacity,
            backend=backend,
            fused=bool(fused),
            check_values=bool(check_values),
            timeout_s=timeout_s,
            on_timeout=on_timeout,
            check_calls=check_calls,
        )
        with on_device(talk_on):
            agree(
                group, record, problems + more + options, what="VocabParallelSampler construction"
            )
        self.check_calls: bool = check_calls
        self.group = group
        self.rank: int = dist.get_rank(group)
        self.columns = columns
        self.vocab = columns * self.world_size
        self.device: torch.device = device
        self.check_values = bool(check_values)
        self.timeout_s, self.on_timeout = timeout_s, on_timeout
        boxes = mailbox.Mailboxes(group, device, timeout_s, on_timeout == "trap")
        self.state = State(group, device, self.rank, self.world_size, columns, capacity,
                           backend, timeout_s, boxes)  # fmt: skip
        self._low = ((1 << 32) - 1) - self.state.ids
        self._zeros: list[torch.Tensor] = []  # positions' zeros (_zero_positions)
        self.fused = None
        if fused and backend != "torch.distributed":
            self.fused = policy.decide(self.state, on_timeout == "trap")
        if self.fused is None:
            self.exchange_for(ops.GREEDY_WIDTH, capacity)
        self.agreement = None
        if check_calls and self.world_size > 1:
            self.agreement = Agreement(group, timeout_s=timeout_s, device=device)

    @property
    def capacity(self) -> int:
        """Rows a call may have (a growing sampler doubles it past a larger ``M``)."""
        return self.state.capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self.state.capacity = value

    @property
    def grow(self) -> bool:
        """Whether calls grow :attr:`capacity` (the module functions' samplers)."""
        return self.state.grow

    @grow.setter
    def grow(self, value: bool) -> None:
        self.state.grow = value

    @property
    def ids(self) -> torch.Tensor:
        """This rank's global token ids (int64 ``[columns]``), the noise's counters."""
        return self.state.ids

    @property
    def filled(self) -> dict:
        """Scalar filters' rows (:func:`.fused.cuts.filled`)."""
        return self.state.filled

    @property
    def held(self) -> list[torch.Tensor]:
        """Those rows that CUDA graphs read (:func:`.fused.cuts.filled`)."""
        return self.state.held

    @property
    def backend(self) -> str:
        """``"symm_mem"`` (mailboxes, or the exchanges' kernel) or ``"torch.distributed"``."""
        if self.fused is not None:
            return "symm_mem"
        return self.exchange_for(ops.GREEDY_WIDTH, 1).gather.backend

    @property
    def exchanges(self) -> tuple[ops.Exchange, ...]:
        """The torch-ops path's exchanges built so far, one per payload width."""
        return tuple(self.state.exchanges.values())

    def box(self, words: int, rows: int) -> mailbox.Mailbox:
        """The fused kernels' mailbox of ``words`` words per rank for ``rows`` rows."""
        return self.state.box(words, rows)

    def check(self) -> None:
        """Raises :class:`~logits_gather.PeerTimeoutError` if a fused kernel or an exchange
        timed out waiting for a peer (no sync: call it after the work to judge)."""
        self.state.boxes.check()
        for ex in self.state.exchanges.values():
            ex.gather.check(synchronize=False)

    def exchange_for(self, width: int, rows: int) -> ops.Exchange:
        """The exchange of ``width`` fp32 words for ``rows`` rows (collective if built)."""
        return self.state.exchange_for(width, rows)

    def _zero_positions(self, m: int) -> torch.Tensor:
        """int64 zeros ``[m]``, the positions when the caller gives none: a view of a buffer
        that only grows, and is never freed (graphs read it); no fill kernel per call."""
        if not self._zeros or self._zeros[-1].shape[0] < m:
            size = max(m, self.capacity)
            self._zeros.append(torch.zeros(size, dtype=torch.int64, device=self.device))
        return self._zeros[-1][:m]

    def _enter(self, op: int, shard: torch.Tensor, parse=None) -> tuple:
        """One call's checks: ``shard`` and ``parse(m)``'s arguments, then the agreement
        between ranks (:func:`.agreement.settle`); then a growing sampler doubles its
        capacity past ``M``. Returns the parsed arguments."""
        collective(f"VocabParallelSampler(columns={self.columns})")
        error, m, values = None, 0, ()
        cap = None if self.grow else self.capacity
        try:
            m = checks.shard(shard, columns=self.columns, device=self.device, capacity=cap)
            values = parse(m) if parse is not None else ()
        except (TypeError, ValueError) as exc:
            error = exc
        settle(self.agreement, self.world_size, shard, error, op, values)
        self.state.fit(m)
        return values

    def greedy(self, shard: torch.Tensor) -> torch.Tensor:
        """Global argmax ``[M]`` (int64), exactly ``torch.argmax`` of the gathered rows."""
        self._enter(GREEDY, shard)
        return self.greedy_rows(shard)

    def greedy_rows(self, shard: torch.Tensor) -> torch.Tensor:
        """:meth:`greedy` of a checked ``shard`` (its capacity fitted)."""
        m = shard.shape[0]
        if self.fused is not None:
            return self.fused.greedy(dense(shard))
        ex = self.exchange_for(ops.GREEDY_WIDTH, m)
        ops.pack_greedy(shard, ex.payload[:m])
        return ops.combine_greedy(ex.send(m), shard.dtype, self.columns)

    def sample(
        self,
        shard: torch.Tensor,
        temperature: torch.Tensor,
        seed: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        top_k: int | torch.Tensor | None = None,
        top_p: float | torch.Tensor | None = None,
        min_p: float | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Tokens ``[M]`` (int64), exactly :func:`.reference.sample` of the gathered rows.

        ``temperature`` float ``[M]`` (0: greedy), ``seed`` and ``positions`` int ``[M]``
        (None: zeros); each filter None, a scalar or an ``[M]`` tensor, off at ``top_k``
        0, ``top_p`` 1.0, ``min_p`` 0.0.
        """
        args = (temperature, seed, positions, top_k, top_p, min_p)
        cv, vocab, device = self.check_values, self.vocab, self.device
        values = self._enter(
            SAMPLE, shard, lambda m: checks.sample_args(m, vocab, device, cv, *args)
        )
        return self.sample_rows(shard, *values)

    def sample_rows(self, shard, t, seeds, positions, k, p, mp) -> torch.Tensor:
        """:meth:`sample` for a checked ``shard`` (its capacity fitted) and arguments as
        :mod:`.checks` returns them, routed by the module's table."""
        m, fused, state = shard.shape[0], self.fused, self.state
        if positions is None:
            positions = self._zero_positions(m)
        k = None if isinstance(k, int) and not 0 < k < self.vocab else k  # scalars off
        p = None if isinstance(p, float) and p >= 1.0 else p
        mp = None if isinstance(mp, float) and mp <= 0.0 else mp
        if fused is not None:
            shard = dense(shard)  # once: every round's writers read it
            rows = (seeds, positions)
            if k is None and p is None and mp is None:
                return fused.sample(shard, t.view(m), rows)
            if isinstance(k, int) and k <= MAX_CANDIDATES:
                pv, mpv = cuts.filter_rows(state, p, mp, m)
                return fused.sample_topk(shard, t.view(m), rows, k, pv, mpv)
            if k is not None or p is not None:
                return cuts.sample(state, fused, shard, t, rows, k, p, mp)
            mpv = cuts.filled(state, mp, m, torch.float32).view(m)
            return fused.sample_minp(shard, t.view(m), rows, mpv)
        return filters.sample(state, shard, t, seeds, positions, k, p, mp)

    def logprobs(self, shard: torch.Tensor, token_ids: torch.Tensor, *, top_n: int = 0) -> Logprobs:
        """fp32 log_softmax of the gathered rows at ``token_ids`` (global ids), and the
        ``top_n`` (0..20) largest: one distributed max and log-sum-exp. ``|err| <= 1e-6 *
        (1 + |ref|)`` against fp64; ``<= 2e-5 * (1 + |ref|)`` against fp32 torch (whose own
        error reaches ``6e-6`` on CPU at V = 151552). NaN in rows with NaN, +inf or all -inf.
        """
        cv, vocab, device = self.check_values, self.vocab, self.device
        ids, n = self._enter(
            LOGPROBS,
            shard,
            lambda m: (
                checks.token_ids(token_ids, m, vocab, device, cv),
                checks.top_n(top_n, vocab),
            ),
        )
        return self.logprobs_rows(shard, ids, n)

    def logprobs_rows(self, shard: torch.Tensor, ids: torch.Tensor, n: int) -> Logprobs:
        m = shard.shape[0]
        if self.fused is not None:
            return Logprobs(*self.fused.logprobs(dense(shard), ids, n))
        room = ops.slots(n, checks.MAX_TOP_N)
        ex = self.exchange_for(ops.logprobs_width(room), m)
        local = ids - self.rank * self.columns
        ops.pack_logprobs(shard.to(torch.float32), local, n, room, ex.payload[:m], self._low)
        return Logprobs(*ops.combine_logprobs(ex.send(m), ids, n, room, self.columns))

    def __repr__(self) -> str:
        return (
            f"VocabParallelSampler(columns={self.columns}, capacity={self.capacity}, "
            f"device={self.device}, rank={self.rank}/{self.world_size}, "
            f"backend={self.backend!r})"
        )
