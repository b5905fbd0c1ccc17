"""The contenders. Each turns this rank's ``[M, N]`` shard into the ``[M, tp*N]`` logits.

A method is built in two steps so that no rank enters a collective alone:
``check`` (local, no communication) says why it cannot run here, the ranks agree,
then ``setup`` (collective) builds it, and the ranks agree again. ``inputs(m)``
returns the method's own copy of every input set (some need their inputs in
registered memory), ``__call__(x)`` runs one gather.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..plan import SHARED_NCCL

ALL_GATHER = getattr(dist, "all_gather_into_tensor", None) or dist.all_gather_single


def vllm_gather(x: torch.Tensor, world: int, group: Any) -> torch.Tensor:
    """vLLM's ``GroupCoordinator.all_gather(x, dim=-1)``: gather into ``[tp*M, N]``, then
    one permute copy to ``[M, tp*N]``."""
    m, n = x.shape
    out = torch.empty((world * m, n), dtype=x.dtype, device=x.device)
    ALL_GATHER(out, x, group=group)
    return out.reshape((world, m, n)).movedim(0, 1).reshape((m, world * n))


class Method:
    name = "?"
    launches = 2  # kernel launches per call: bounds how many calls may be queued
    graphable = False  # timed under CUDA-graph replay as well
    detail = ""

    def __init__(self, ctx: Any, columns: int, sets: list[torch.Tensor]) -> None:
        self.ctx, self.n, self.sets = ctx, columns, sets
        self.world, self.group = ctx.world, ctx.group

    def check(self) -> str | None:
        return None

    def setup(self) -> None:
        pass

    def inputs(self, m: int) -> list[torch.Tensor]:
        return [s[:m] for s in self.sets]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def close(self) -> None:
        """Releases what may be released; symmetric buffers are kept (see probes.KEPT)."""


class Stock(Method):
    """vLLM's path, unchanged."""

    name = "stock"

    def check(self) -> str | None:
        if self.ctx.plan.shared:
            return SHARED_NCCL
        self.graphable = self.ctx.cuda
        self.detail = f"dist.{ALL_GATHER.__name__} + permute copy ({self.ctx.plan.pg_backend})"
        return None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return vllm_gather(x, self.world, self.group)


class NcclSymm(Method):
    """The same NCCL all-gather, from and into NCCL-window (symmetric) memory, so NCCL
    may pick its symmetric kernels; then the permute. Route ``mempool``: a
    ``torch.cuda.MemPool`` on the process group's NCCL allocator, registered with
    ``register_mem_pool(pool, symm=True)``; route ``symm_mem``: torch symmetric memory
    with ``set_backend("NCCL")`` (process-global: ours' buffers then use it too)."""

    name = "nccl_symm"

    def check(self) -> str | None:
        mode = self.ctx.plan.mode
        if mode == "cpu":
            return "needs CUDA GPUs and NCCL (this run is on CPU with gloo)"
        if self.ctx.plan.shared:
            return SHARED_NCCL
        self.route = self.ctx.cfg.nccl_symm_route
        if self.route == "mempool" and not hasattr(torch.cuda, "use_mem_pool"):
            return f"torch {torch.__version__} has no torch.cuda.use_mem_pool"
        return None

    def setup(self) -> None:
        cap, n, dev, dtype = self.sets[0].shape[0], self.n, self.ctx.device, self.sets[0].dtype
        shape_in, numel_out = (len(self.sets), cap, n), self.world * cap * n
        if self.route == "mempool":
            backend = self.group._get_backend(dev)
            self._backend = backend
            self._pool = torch.cuda.MemPool(backend.mem_allocator)
            with torch.cuda.use_mem_pool(self._pool):
                self._in = torch.empty(shape_in, dtype=dtype, device=dev)
                self._staging = torch.empty(numel_out, dtype=dtype, device=dev)
            torch.cuda.synchronize(dev)
            backend.register_mem_pool(self._pool, symm=True)
        else:
            import torch.distributed._symmetric_memory as symm_mem

            self._in = symm_mem.empty(shape_in, dtype=dtype, device=dev)
            self._staging = symm_mem.empty(numel_out, dtype=dtype, device=dev)
            self._handles = [symm_mem.rendezvous(t, self.group) for t in (self._in, self._staging)]
        for s, src in enumerate(self.sets):
            self._in[s].copy_(src)
        self.graphable = True
        self.detail = f"route {self.route}"

    def inputs(self, m: int) -> list[torch.Tensor]:
        return [self._in[s, :m] for s in range(len(self.sets))]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m, n, w = x.shape[0], self.n, self.world
        staging = self._staging[: w * m * n].view(w * m, n)
        ALL_GATHER(staging, x, group=self.group)
        return staging.view(w, m, n).movedim(0, 1).reshape(m, w * n)

    def close(self) -> None:
        """Collective (window deregistration): every rank closes at the same point."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            torch.cuda.synchronize(self.ctx.device)
            self._backend.deregister_mem_pool(pool)
            self._pool = None


class CePull(Method):
    """torch's copy-engine all-gather (``symm_mem._low_contention_all_gather``: barrier,
    one peer-to-peer copy per rank, barrier), from symmetric inputs; then the permute."""

    name = "ce_pull"

    def check(self) -> str | None:
        if not self.ctx.cuda:
            return "needs CUDA (torch symmetric memory); this run is on CPU"
        try:
            import torch.distributed._symmetric_memory  # noqa: F401

            self._op = torch.ops.symm_mem._low_contention_all_gather
        except (ImportError, AttributeError, RuntimeError) as exc:
            return (
                f"torch.ops.symm_mem._low_contention_all_gather is missing in torch "
                f"{torch.__version__} ({type(exc).__name__})"
            )
        self.launches = self.world + 6
        return None

    def setup(self) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        cap, dtype = self.sets[0].shape[0], self.sets[0].dtype
        # one allocation per set: the op reads each peer's buffer from its start
        self._bufs = [
            symm_mem.empty(cap * self.n, dtype=dtype, device=self.ctx.device) for _ in self.sets
        ]
        for buf, src in zip(self._bufs, self.sets, strict=True):
            buf.view(cap, self.n).copy_(src)
        self._handles = [symm_mem.rendezvous(b, self.group) for b in self._bufs]
        for b, h in zip(self._bufs, self._handles, strict=True):
            offset = b.data_ptr() - int(h.buffer_ptrs[self.ctx.rank])
            if offset:
                raise RuntimeError(
                    f"a symmetric input sits {offset} bytes into its allocation, "
                    "and the op reads every peer's buffer at offset 0"
                )
        self._name = self.group.group_name
        get_stream = getattr(symm_mem, "_get_backend_stream", None)
        self._stream = get_stream() if get_stream is not None else None
        self.detail = "copy engine pulls, symmetric inputs"

    def inputs(self, m: int) -> list[torch.Tensor]:
        return [b[: m * self.n].view(m, self.n) for b in self._bufs]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m, n, w = x.shape[0], self.n, self.world
        out = self._op(x, self._name)
        if self._stream is not None:  # the op runs on a side stream; join it
            torch.cuda.current_stream().wait_stream(self._stream)
        else:
            out = torch.ops._c10d_functional.wait_tensor(out)
        return out.view(w, m, n).movedim(0, 1).reshape(m, w * n)


class Ours(Method):
    """``LogitsGather`` with the backend the user asked for (default ``auto``)."""

    name = "ours"
    launches = 1
    extra: dict[str, Any] = {}

    def setup(self) -> None:
        from logits_gather import LogitsGather

        extra = dict(self.extra)
        if _has_check_calls():  # plain ours stays unchecked even if the env turns checks on
            extra.setdefault("check_calls", False)
        self.gather = LogitsGather(
            columns=self.n,
            capacity=self.sets[0].shape[0],
            device=self.ctx.device,
            dtype=self.sets[0].dtype,
            backend=self.ctx.cfg.ours_backend,
            **extra,
        )
        self.graphable = self.ctx.cuda and not self.extra
        self.detail = f"backend {self.gather.backend}" + "".join(
            f", {k}={v}" for k, v in self.extra.items()
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.gather(x)


class OursChecked(Ours):
    """``LogitsGather(check_calls=True)``: every call verifies that all ranks agree on
    the call index, M and dtype. Timed next to ``ours`` to state what the checks cost."""

    name = "ours_checked"
    launches = 4  # the checks may add launches of their own
    extra = {"check_calls": True}

    def check(self) -> str | None:
        if not _has_check_calls():
            return "this LogitsGather has no check_calls keyword (TypeError if passed)"
        return None


def _has_check_calls() -> bool:
    import inspect

    from logits_gather import LogitsGather

    return "check_calls" in inspect.signature(LogitsGather.__init__).parameters


BUILDERS: dict[str, type[Method]] = {
    c.name: c for c in (Stock, NcclSymm, CePull, Ours, OursChecked)
}
