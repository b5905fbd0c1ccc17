"""VocabParallelSampler: greedy, sample and logprobs on vocab shards, and which path
serves each call.

Without the fused kernels (no Triton, CPU, ``fused=False`` or
``LOGITS_GATHER_SAMPLING_TORCH=1``) every call takes the torch-ops path
(:mod:`.exact`). On the fused path (:mod:`.fused`), ``sample`` routes by its filters,
after dropping those that are off (``top_k`` 0 or >= V, ``top_p >= 1``, ``min_p <= 0``
as scalars):

| filters | path |
|---|---|
| none | :meth:`.rounds.Rounds.sample` |
| ``min_p`` alone | :meth:`.rounds.Rounds.sample_minp` |
| an int ``top_k <= 64`` (and ``top_p``, ``min_p``) | :meth:`.filtered.Fused.sample_topk` |
| a per-row ``top_k`` tensor (and the others) | :func:`.fallback.sample_rows_k` |
| ``top_p`` (and ``min_p``) | :func:`.fallback.sample` |
| an int ``top_k`` in 65..V-1 | :func:`.filters.sample` (exact) |

The last two rows' fused kernels fall back to the exact path for rows their
candidates cannot decide (:mod:`.fallback`); under CUDA graph capture those calls take
the exact path alone.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch
import torch.distributed as dist

from ..checks import resolve_device, resolve_options
from . import checks
from .exact import exchange, filters, ops
from .exact.filters import MAX_CANDIDATES
from .fused import fallback, mailbox, policy

log = logging.getLogger(__name__)


class Logprobs(NamedTuple):
    """``logprobs[i]`` = log_softmax(row i)[token_ids[i]] (fp32); ``top_ids``/``top_logprobs``
    are the ``top_n`` largest logits of each row, largest first, ties by lower id."""

    logprobs: torch.Tensor
    top_ids: torch.Tensor
    top_logprobs: torch.Tensor


class VocabParallelSampler:
    """Sampling operations on ``[M, columns]`` vocab shards; rank ``r`` holds global
    columns ``r * columns .. (r + 1) * columns - 1``.

    Construction is collective over ``group`` (all ranks, same arguments): it
    builds the exchanges for :meth:`greedy`, :meth:`sample` without filters
    and :meth:`logprobs` without ``top_n``. The first call with a new ``top_k``
    size, filter kind (top-p, min-p, per-row tensors) or ``top_n`` may build
    more exchanges, collectively, so every rank must make the same calls with
    the same ``M``, filters and ``top_n``; run each variant once before
    capturing a CUDA graph. ``backend`` is passed to
    :class:`~logits_gather.LogitsGather`. ``check_values=False`` skips the
    value checks (one host sync per call; they are also skipped during capture).

    On CUDA with Triton, when every rank's GPU can map its peers' memory (as
    :class:`~logits_gather.LogitsGather`'s kernel needs) and the group has at most 4
    ranks, calls run on the fused kernels (the module docstring says which call takes
    which sequence); ``fused=False``, or ``LOGITS_GATHER_SAMPLING_TORCH=1`` in every rank's
    environment, forces the torch-ops path (the one CPUs use). ``timeout_s`` and
    ``on_timeout`` bound the fused kernels' waits for peers as in ``LogitsGather``
    (defaults from ``LOGITS_GATHER_TIMEOUT_S`` / ``LOGITS_GATHER_ON_TIMEOUT``); see
    :meth:`check`.
    """

    def __init__(
        self,
        columns: int,
        capacity: int,
        device: torch.device | str | int | None = None,
        group: dist.ProcessGroup | None = None,
        *,
        backend: str = "auto",
        check_values: bool = True,
        fused: bool = True,
        timeout_s: float | None = None,
        on_timeout: str | None = None,
    ) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "VocabParallelSampler needs torch.distributed to be initialised "
                "(call torch.distributed.init_process_group first)"
            )
        checks.construction(columns, capacity, backend)
        device, problems = resolve_device(device)
        timeout_s, on_timeout, _, more = resolve_options(timeout_s, on_timeout, False)
        if problems or more:
            raise ValueError("; ".join(problems + more))
        self.group = group
        self.world_size: int = dist.get_world_size(group)
        self.rank: int = dist.get_rank(group)
        self.columns = columns
        self.vocab = columns * self.world_size
        self.capacity = capacity
        self.device: torch.device = device
        self.check_values = bool(check_values)
        self._backend = backend
        self.grow = False
        start = self.rank * columns
        self.ids = torch.arange(start, start + columns, dtype=torch.int64, device=device)
        """This rank's global token ids (int64 ``[columns]``), the noise's counters."""
        self._low = torch.arange(start, start + columns, dtype=torch.int64, device=device)
        self._low.neg_().add_((1 << 32) - 1)
        self._exchanges: dict[int, exchange.Exchange] = {}
        self._boxes = mailbox.Mailboxes(group, device, timeout_s, on_timeout == "trap")
        self.timeout_s, self.on_timeout = timeout_s, on_timeout
        self.fused = None
        self.fallback_warm: set[str] = set()  # kinds whose fallback ran once (fallback.py)
        self.filled: dict[tuple, torch.Tensor] = {}  # scalar filters' rows (fallback.filled)
        if fused and backend != "torch.distributed":
            self.fused = policy.decide(self, on_timeout == "trap")
        if self.fused is None:
            for width in (ops.GREEDY_WIDTH, ops.BEST_WIDTH):
                self.exchange_for(width, capacity)

    @property
    def backend(self) -> str:
        """How ranks exchange values: ``"symm_mem"`` (the fused kernels' mailboxes, or the
        exchanges' symmetric-memory kernel) or ``"torch.distributed"``."""
        if self.fused is not None:
            return "symm_mem"
        return self.exchange_for(ops.GREEDY_WIDTH, 1).backend

    def box(self, words: int, rows: int) -> mailbox.Mailbox:
        """The fused kernels' mailbox of ``words`` words per rank for ``rows`` rows."""
        return self._boxes.get(words, rows, self.capacity)

    def check(self) -> None:
        """Raises :class:`~logits_gather.PeerTimeoutError` if a fused kernel, or an
        exchange of the torch-ops path (the fallback's too), timed out waiting for a peer
        (with ``on_timeout="trap"`` the kernel also aborted). It reads the kernels' status
        blocks without synchronizing: call it after the work it should judge is done."""
        self._boxes.check()
        for ex in self._exchanges.values():
            ex.gather.check(synchronize=False)

    def exchange_for(self, width: int, rows: int) -> exchange.Exchange:
        """The torch-ops path's exchange of ``width`` fp32 words for ``rows`` rows."""
        ex = self._exchanges.get(width)
        if ex is None or ex.capacity < rows:
            cap = max(rows, self.capacity)
            ex = exchange.get(width, rows, self.group, self.device, self._backend, capacity=cap)
            self._exchanges[width] = ex
        return ex

    def rows(self, shard: torch.Tensor) -> int:
        """``M`` of a checked ``shard`` (grows the capacity where the sampler may)."""
        cap = None if self.grow else self.capacity
        m = checks.shard(shard, columns=self.columns, device=self.device, capacity=cap)
        if m > self.capacity:  # only when growing: double, so growth stays rare
            self.capacity = max(1 << (m - 1).bit_length(), 2 * self.capacity)
        return m

    def greedy(self, shard: torch.Tensor) -> torch.Tensor:
        """Global argmax ``[M]`` (int64) of the gathered rows, exactly ``torch.argmax``:
        the lowest global id among equal maxima, the first NaN if a row has one."""
        m = self.rows(shard)
        if self.fused is not None:
            return self.fused.greedy(shard)
        ex = self.exchange_for(ops.GREEDY_WIDTH, m)
        ops.pack_greedy(shard, ex.payload[:m])
        return ops.combine_greedy(ex.send(m), shard.dtype, self.columns)[0]

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
        """Token ``[M]`` (int64) drawn from softmax(logits / T) restricted by the filters.

        Exactly :func:`.reference.sample` on the gathered logits, at any tp: vLLM's V2
        sampling (noise keyed by ``(seed[i], positions[i], token id)``, ``x / T``,
        min-p), then an exact top-k/top-p of our own (the definition, with every tie
        rule, is in :mod:`.reference`). ``positions`` is int ``[M]`` (None: zeros).
        Each filter is None, a scalar or an ``[M]`` tensor; ``top_k`` 0, ``top_p`` 1.0
        and ``min_p`` 0.0 switch a row's filter off. ``temperature[i] == 0`` gives
        the greedy token.
        """
        m = self.rows(shard)
        dev = self.device
        t = checks.temperature(temperature, m, dev, self.check_values)
        seeds = checks.seed(seed, m, dev)
        pos = checks.positions(positions, m, dev)
        k = checks.top_k(top_k, m, self.vocab, dev, self.check_values)
        p = checks.top_p(top_p, m, dev, self.check_values)
        mp = checks.min_p(min_p, m, dev, self.check_values)
        return self.sample_rows(shard, t, seeds, pos, k, p, mp)

    def sample_rows(self, shard: torch.Tensor, t: torch.Tensor, seeds: torch.Tensor,
                    positions: torch.Tensor, k, p, mp) -> torch.Tensor:  # fmt: skip
        """:meth:`sample` for checked arguments (``t`` fp32 ``[M, 1]``, ``seeds`` and
        ``positions`` int64 ``[M]``; ``k`` an int or int64 ``[M]``, ``p`` and ``mp`` floats
        or ``[M]`` tensors, or None), routed as the module docstring's table says. The
        fused kernels read seed and position from one int64 ``[M, 2]`` tensor."""
        m, fused = shard.shape[0], self.fused
        if isinstance(k, int) and not 0 < k < self.vocab:
            k = None
        if isinstance(p, float) and p >= 1.0:
            p = None
        if isinstance(mp, float) and mp <= 0.0:
            mp = None
        if fused is not None and not (isinstance(k, int) and k > MAX_CANDIDATES):
            rows = torch.stack((seeds, positions), 1)
            if k is None and p is None and mp is None:
                return fused.sample(shard, t.view(m), rows)
            if isinstance(k, int):  # top-k, then min-p and/or top-p over the exact top-k set
                _, _, pv, mpv = fallback.filter_rows(self, p, mp, m)
                return fused.sample_topk(shard, t.view(m), rows, k, pv, mpv)
            draw = (seeds, positions, rows)
            if k is not None:
                return fallback.sample_rows_k(self, shard, t, draw, k, p, mp)
            if p is not None:  # top-p (+ min-p)
                return fallback.sample(self, shard, t, draw, p, mp)
            mpv = fallback.filled(self, mp, m, torch.float32).view(m)  # min-p alone
            return fused.sample_minp(shard, t.view(m), rows, mpv)
        mp = fallback.rows(mp, m, torch.float32, self.device)
        k = fallback.rows(k, m, torch.int64, self.device)
        p = fallback.rows(p, m, torch.float64, self.device)
        return filters.sample(self, shard, t, seeds, positions, k, p, mp)

    def logprobs(self, shard: torch.Tensor, token_ids: torch.Tensor, *, top_n: int = 0) -> Logprobs:
        """log_softmax of the gathered fp32 rows at ``token_ids`` (global ids), plus the
        ``top_n`` (0..20) most likely tokens; see :class:`Logprobs`.

        One distributed max and log-sum-exp in fp32. Tolerance: ``|err| <= 1e-6 * (1 + |ref|)``
        against the exact (fp64) log_softmax, and ``|err| <= 2e-5 * (1 + |ref|)`` against
        ``torch.log_softmax(gathered.float(), 1)`` (whose own fp32 error reaches about
        6e-6 * (1 + |ref|) on CPU at V = 151552). Rows with NaN or +inf, and rows of
        all -inf, give NaN as log_softmax does.
        """
        m = self.rows(shard)
        ids = checks.token_ids(token_ids, m, self.vocab, self.device, self.check_values)
        n = checks.top_n(top_n, self.vocab)
        return self.logprobs_rows(shard, ids, n)

    def logprobs_rows(self, shard: torch.Tensor, ids: torch.Tensor, n: int) -> Logprobs:
        m = shard.shape[0]
        if self.fused is not None:
            return Logprobs(*self.fused.logprobs(shard, ids, n))
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


__all__ = ["MAX_CANDIDATES", "Logprobs", "VocabParallelSampler"]
