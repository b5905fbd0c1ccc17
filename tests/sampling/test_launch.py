"""The sampler's launch rules that need no GPU: the barrier before each fused kernel
variant's first launch (ranks sharing a GPU), and ``check()`` covering every exchange."""

from __future__ import annotations

import logging

import pytest
import torch

from scripts.support.dist import run_ranks


class _Compiled:
    def __init__(self, log: list) -> None:
        self.log = log

    def _init_handles(self) -> None:
        self.log.append("load")


class _Kernel:
    """Stands in for a Triton JITFunction: records compiles, loads and launches."""

    arg_names = ("x", "y", "K", "PDL")

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log
        self.__name__ = name

    def warmup(self, *args, grid, num_warps, **consts):
        self.log.append(("compile", self.name, grid, num_warps, consts))
        return _Compiled(self.log)

    def __getitem__(self, grid):
        def launch(*args, num_warps, **consts):
            self.log.append(("launch", self.name, grid, args))

        return launch


def test_barrier_after_load_before_first_launch() -> None:
    """Each variant (kernel, grid[1], warps, constexprs) is compiled and loaded, then the
    barrier runs, then it launches; later launches of the variant skip all three, whatever
    their rows or int arguments (a rank's own offset differs across ranks: the barrier
    calls must not)."""
    from logits_gather.sampling.fused.launcher import Launcher

    log: list = []
    launch = Launcher(None, barrier=lambda: log.append("barrier"))
    a, b = _Kernel("a", log), _Kernel("b", log)
    launch(a, (4, 3), (0, 7), {"K": 1}, 4)
    assert log == [
        ("compile", "a", (4, 3), 4, {"K": 1, "PDL": False}),
        "load",
        "barrier",
        ("launch", "a", (4, 3), (0, 7)),
    ]
    log.clear()
    launch(a, (9, 3), (195, 7), {"K": 1}, 4)  # other rows, another rank's offset
    assert log == [("launch", "a", (9, 3), (195, 7))]
    log.clear()
    launch(a, (4, 2), (0,), {"K": 1}, 4)  # other programs per row
    launch(a, (4, 3), (0,), {"K": 2}, 4)  # other constexprs
    launch(a, (4, 3), (0,), {"K": 1}, 8)  # other warps
    launch(b, (4, 3), (0,), {"K": 1}, 4)  # another kernel
    assert log.count("barrier") == 4 and log.count("load") == 4
    assert [e for e in log if isinstance(e, str)] == ["load", "barrier"] * 4
    log.clear()
    Launcher(None)(a, (4, 3), (0,), {"K": 1}, 4)  # no barrier: no compile-only step
    assert log == [("launch", "a", (4, 3), (0,))]
    log.clear()

    def broken(*args, **kwargs):
        raise RuntimeError("compile error")

    a.warmup = broken  # a failed compile still reaches the barrier (peers wait in it)
    launch(a, (4, 3), (0,), {"K": 3}, 4)
    assert log == ["barrier", ("launch", "a", (4, 3), (0,))]


def test_a_constexpr_the_kernel_lacks_is_an_error() -> None:
    """A launch naming a constexpr that the kernel does not declare raises before
    compiling, naming the kernel and the names (the interpreter would ignore them)."""
    from logits_gather.sampling.fused.launcher import Launcher

    log: list = []
    with pytest.raises(TypeError, match=r"a has no parameters \['PAIRS', 'Q'\]"):
        Launcher(None)(_Kernel("a", log), (4, 3), (0,), {"K": 1, "Q": 2, "PAIRS": True}, 4)
    assert log == []


# A poll loop's header as ptxas sees it: the readiness test decided by one warp alone
# (a replicated poll before session 11's fix), and decided block-wide.
WARP_LOCAL = """$L__BB0_3:                              //   Parent Loop BB0_2 Depth=1
                                        // =>  This Inner Loop Header: Depth=2
\t@%p24 ld.volatile.global.b64 { %rd57 }, [ %rd186 + 0 ];
\tredux.sync.min.s32 \t%r95, %r93, %r94;
\tsetp.eq.b32 \t%p18, %r95, 1;
\t@%p18 bra \t$L__BB0_9;
\tbar.sync \t0;
$L__BB0_9:
"""
BLOCK_WIDE = WARP_LOCAL.replace("\tredux.sync", "\tbar.sync \t0;\n\tredux.sync")


class _WithPtx:
    def __init__(self, ptx: str) -> None:
        self.asm = {"ptx": ptx}


def test_poll_check_tells_warp_local_exits_apart() -> None:
    from scripts.support.polls import check, warp_local_polls

    assert warp_local_polls(WARP_LOCAL) == ["$L__BB0_3"]
    assert warp_local_polls(BLOCK_WIDE) == []
    assert warp_local_polls(WARP_LOCAL.replace("ld.volatile", "ld.global")) == []  # no poll
    with pytest.raises(RuntimeError, match=r"nucleus_final \(8 warps\).*\$L__BB0_3"):
        check(_WithPtx(WARP_LOCAL), "nucleus_final", 8)
    check(_WithPtx(WARP_LOCAL), "greedy_final", 1)  # one warp: its test is the CTA's
    check(_WithPtx(BLOCK_WIDE), "nucleus_final", 8)
    check(object(), "nucleus_final", 8)  # no PTX (the interpreter): nothing to check


def test_sharing_barrier_warns_once_about_lazy_loading(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from logits_gather.sampling.fused import policy as fastpath

    monkeypatch.setattr(fastpath, "_warned_lazy", [])
    monkeypatch.setenv(fastpath.LOADING_ENV, "EAGER")
    with caplog.at_level(logging.WARNING, logger=fastpath.__name__):
        assert callable(fastpath.sharing_barrier(None, 1.0))
    assert not caplog.records
    monkeypatch.setenv(fastpath.LOADING_ENV, "LAZY")
    with caplog.at_level(logging.WARNING, logger=fastpath.__name__):
        fastpath.sharing_barrier(None, 1.0)
        fastpath.sharing_barrier(None, 1.0)
    assert len(caplog.records) == 1
    assert "CUDA_MODULE_LOADING=EAGER" in caplog.records[0].getMessage()


def _dead_peer(rank: int, world: int) -> str:
    import time

    from logits_gather.sampling.fused import policy as fastpath

    fastpath.COMPILE_S = 1.0  # this process's copy only
    barrier = fastpath.sharing_barrier(None, 0.5)
    barrier()  # both ranks arrive
    if rank == 1:
        time.sleep(4)  # stalled: never reaches the second barrier in time
        return "stalled"
    with pytest.raises(RuntimeError, match="Ranks 1 failed to pass"):
        barrier()  # raised before the peer arrives (it would pass the barrier then)
    return "raised"


def test_sharing_barrier_names_a_dead_peer() -> None:
    """The shared-GPU launch barrier is gloo's monitored barrier: a peer that never
    arrives is named after ``max(timeout_s, COMPILE_S)`` instead of hanging the first
    calls."""
    assert run_ranks(_dead_peer, 2) == ["raised", "stalled"]


def _check_covers_exchanges(rank: int, world: int) -> str:
    from logits_gather import PeerTimeoutError, sampling

    n = 16
    sampler = sampling.VocabParallelSampler(n, 4, backend="torch.distributed")
    shard = torch.randn(3, n)
    sampler.greedy(shard)
    sampler.check()  # nothing timed out
    assert sampler.exchanges
    for ex in sampler.exchanges:  # each of them alone makes check() raise

        def timed_out(synchronize: bool = True) -> None:
            raise PeerTimeoutError("timed out waiting for rank 1 (test)")

        ex.gather.check = timed_out
        with pytest.raises(PeerTimeoutError, match=r"rank 1 \(test\)"):
            sampler.check()
        del ex.gather.check
    sampler.check()
    return "ok"


def test_check_covers_exchanges() -> None:
    """A timeout in an exchange of the torch-ops path (the fallback's) makes the sampler's
    ``check()`` raise, as a fused kernel's does."""
    assert run_ranks(_check_covers_exchanges, 1) == ["ok"]


class _Run:
    """Stands in for a compiled kernel's launcher (``CompiledKernel.run``)."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid = launch_pdl = False

    def __init__(self, log: list) -> None:
        self.log, self.fail = log, False

    def launch(self, *args) -> None:
        if self.fail:
            raise RuntimeError("stale launcher (test)")
        self.log.append(args)

    __call__ = launch


class _Bindable:
    """A JITFunction stand-in whose launch returns a compiled kernel with a C launcher."""

    arg_names = ("a", "b", "c", "d", "K", "PDL")

    def __init__(self, log: list) -> None:
        self.compiled = type("CK", (), {})()
        self.compiled.run = _Run(log)
        self.compiled.function, self.compiled.packed_metadata = "fn", "meta"
        self.log = log

    def __getitem__(self, grid):
        def jit(*args, num_warps, launch_pdl=False, **consts):
            self.log.append(("jit", grid, args) + ((consts["PDL"],) if launch_pdl else ()))
            return self.compiled

        return jit


def test_bound_launch_fixes_all_but_the_free_arguments(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After a first launch, ``bind`` gives the compiled kernel's C launch with every
    argument after the free ones fixed (tensors as their addresses: the C launcher then
    neither calls ``data_ptr`` nor asks the driver about them); ``fast`` launches it on
    the launcher's device and stream (a cached unbound launch passes tensors as addresses
    too). A bound launch that fails returns False (the caller
    then launches through the JIT route), which serves from then on (logged once):
    nothing binds afterwards."""
    from logits_gather.sampling.fused import launcher as launcher_mod

    monkeypatch.setattr(launcher_mod, "_get_device", lambda: 0)
    log: list = []
    launch = launcher_mod.Launcher(0)
    launch._stream = lambda index: 1000 + index
    fn = _Bindable(log)
    frozen = torch.arange(4)
    args = (torch.zeros(2), 7, frozen, 5)
    assert launch.bind(fn, 3, args, {"K": 2}, 4, 2) is None  # never launched: nothing bound
    launch(fn, (9, 3), args, {"K": 2}, 4)
    assert log == [("jit", (9, 3), args)]
    log.clear()
    launch(fn, (5, 3), args, {"K": 2}, 4)  # cached: tensors as addresses here too
    head = ("fn", False, False, None, None, "meta", None, None, None)
    ptrs = (args[0].data_ptr(), 7, frozen.data_ptr(), 5)
    assert log == [(5, 3, 1, 1000, *head, *ptrs, 2, False)]  # constexprs last: K, PDL
    bound = launch.bind(fn, 3, args, {"K": 2}, 4, 2)
    assert bound is not None
    assert launch.bind(fn, 3, args, {"K": 8}, 4, 2) is None  # another constexpr: not compiled
    log.clear()
    assert launch.fast(bound, 6, (111, 7))
    assert log == [(6, 3, 1, 1000, *head, 111, 7, frozen.data_ptr(), 5, 2, False)]
    log.clear()
    fn.compiled.run.fail = True
    with caplog.at_level(logging.WARNING, logger=launcher_mod.__name__):
        assert not launch.fast(bound, 6, (111, 7))
    assert log == []
    assert "bound Triton launch failed" in caplog.records[0].getMessage()
    assert launch.bind(fn, 3, args, {"K": 2}, 4, 2) is None


def test_pdl_launches_name_it_to_triton_and_to_the_kernel() -> None:
    """With ``pdl`` every launch is compiled with ``launch_pdl`` and gets ``PDL=True``, so
    the kernel's ``ll.enter`` waits for the kernel before it; without it ``PDL=False``."""
    from logits_gather.sampling.fused.launcher import Launcher

    log: list = []
    fn = _Bindable(log)
    for pdl in (True, False):
        launch = Launcher(None, pdl=pdl)
        launch._stream = lambda index: 0  # no CUDA driver here
        launch(fn, (2, 1), (7,), {"K": 2}, 4)
    assert log == [("jit", (2, 1), (7,), True), ("jit", (2, 1), (7,))]


def test_scalar_filters_rows_are_cached_and_exact() -> None:
    """A scalar top_p or min_p costs no fill kernel per eager call (topp.filled): the
    same storage serves later calls of any M up to the capacity, its values equal a
    fresh fill, tensors pass through, and the cache stays bounded."""
    from types import SimpleNamespace

    from logits_gather.sampling.fused import cuts as topp

    s = SimpleNamespace(device=torch.device("cpu"), capacity=8, filled={}, held=[])
    p = topp.filled(s, 0.9, 5, torch.float64)
    assert p.shape == (5, 1) and torch.equal(p, topp.rows(0.9, 5, torch.float64, s.device))
    again = topp.filled(s, 0.9, 3, torch.float64)
    assert again.data_ptr() == p.data_ptr() and again.shape == (3, 1)
    mp = topp.filled(s, 0.05, 8, torch.float32)
    assert mp.dtype == torch.float32 and torch.equal(mp, torch.full((8, 1), 0.05))
    assert topp.filled(s, 0.9, 20, torch.float64).shape == (20, 1)  # past the capacity
    rows = torch.rand(6, 1)
    assert topp.filled(s, rows, 6, torch.float32) is rows
    assert topp.filled(s, None, 6, torch.float32) is None
    pv, mpv = topp.filter_rows(s, 0.9, rows, 6)
    assert mpv.shape == (6,) and mpv.data_ptr() == rows.data_ptr()  # no log kernel
    assert pv.shape == (6,) and pv.dtype == torch.float64
    for i in range(3 * topp.FILLED_MOST):
        topp.filled(s, i / 1000, 2, torch.float32)
    assert len(s.filled) <= topp.FILLED_MOST and not s.held


def test_captured_calls_hold_the_scalar_rows_they_read(monkeypatch) -> None:
    """Under capture a scalar filter reads the rows an eager call cached, and the sampler
    holds them for good, so the cache's evictions never free what a graph reads; with no
    cached rows the captured call fills its own and caches nothing."""
    from types import SimpleNamespace

    from logits_gather.sampling.fused import cuts as topp

    s = SimpleNamespace(device=torch.device("cpu"), capacity=8, filled={}, held=[])
    monkeypatch.setattr(topp.ops, "capturing", lambda dev: True)
    own = topp.filled(s, 0.7, 4, torch.float64)
    assert torch.equal(own, torch.full((4, 1), 0.7, dtype=torch.float64))
    assert not s.filled and not s.held
    monkeypatch.setattr(topp.ops, "capturing", lambda dev: False)
    eager = topp.filled(s, 0.7, 4, torch.float64)
    monkeypatch.setattr(topp.ops, "capturing", lambda dev: True)
    for m in (4, 8, 4):
        got = topp.filled(s, 0.7, m, torch.float64)
        assert got.data_ptr() == eager.data_ptr() and got.shape == (m, 1)
    assert len(s.held) == 1 and s.held[0].data_ptr() == eager.data_ptr()
    assert topp.filled(s, 0.7, 9, torch.float64).data_ptr() != eager.data_ptr()  # too few rows
    monkeypatch.setattr(topp.ops, "capturing", lambda dev: False)
    for i in range(3 * topp.FILLED_MOST):
        topp.filled(s, i / 1000, 2, torch.float32)
    assert (0.7, torch.float64) not in s.filled
    assert torch.equal(s.held[0], torch.full((8, 1), 0.7, dtype=torch.float64))


def test_row_parameters_reach_the_kernels_contiguous() -> None:
    """The fused kernels read a per-row parameter at ``ptr + row``: every checked tensor
    is contiguous, whatever the caller's strides. A float32 ``top_p`` (vLLM's) stays
    float32, with no conversion kernel (the kernels widen it exactly); other dtypes
    become float64."""
    from logits_gather.sampling import checks

    cpu = torch.device("cpu")
    base = torch.rand(6, 3) * 0.5 + 0.25
    t = checks.temperature(base[:, 1], 6, cpu, True)
    assert t.is_contiguous() and torch.equal(t.view(6), base[:, 1])
    for dtype, want in ((torch.float32, torch.float32), (torch.float64, torch.float64),
                        (torch.bfloat16, torch.float64)):  # fmt: skip
        x = base.to(dtype)[:, 2]
        p = checks.top_p(x, 6, cpu)
        assert p.dtype == want and p.is_contiguous() and p.shape == (6, 1)
        assert torch.equal(p.view(6).double(), x.double())
    mp = checks.min_p(base.double()[:, 0], 6, cpu)
    assert mp.dtype == torch.float32 and mp.is_contiguous()
    k = checks.top_k(torch.arange(12, dtype=torch.int32)[::2], 6, 100, cpu)
    assert (
        k.dtype == torch.int64 and k.is_contiguous() and k.view(6).tolist() == [0, 2, 4, 6, 8, 10]
    )
    s = checks.seed(torch.arange(12)[1::2], 6, cpu)
    assert s.is_contiguous() and s.tolist() == [1, 3, 5, 7, 9, 11]
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 1.00000001"):
        checks.top_p(torch.tensor([0.5, 1.00000001], dtype=torch.float64), 2, cpu)  # fp32: 1.0


def test_one_launch_binds_per_specialisation() -> None:
    """Eager calls of at most ``single_rows`` rows take one launch per round; after the
    first launch of a specialisation the bound launch serves (whatever ``M``), and a free
    tensor of another dtype compiles anew. Needs Triton (the rounds import the kernels)."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from logits_gather.sampling.fused.fused import Fused

    launched: list = []
    box = SimpleNamespace(plans={}, check=lambda: None, peers=0, data=0, epoch=0, arrivals=0,
                          parity_stride=0, row_elems=0, status_ptr=0, timeout_us=1)  # fmt: skip
    geo = SimpleNamespace(block=4096, warps=8, splits=2, cand=8)
    f = SimpleNamespace(box=lambda words, rows: box, words=lambda op, room: 2, rank=0, world=2,
                        geometry=lambda op, room: geo, columns=8192, col0=0, trap=False,
                        single_rows=100, single_in_graphs=False)  # fmt: skip

    class _Launch:
        def __call__(self, fn, grid, args, consts, warps):
            launched.append(grid)

        def bind(self, *args):
            return object()

        def fast(self, plan, m, args):
            launched.append(("bound", m))
            return True

    f.launch = _Launch()
    fn = object()
    for m in (4, 10, 100):
        shard = torch.zeros(m, 8192)
        assert Fused.one_wanted(f, shard)
        Fused.one(f, fn, shard, "greedy", (torch.zeros(1),), (), {})
    assert not Fused.one_wanted(f, torch.zeros(101, 8192))
    assert launched == [(4, 2), ("bound", 10), ("bound", 100)]
    Fused.one(f, fn, torch.zeros(4, 8192), "greedy", (torch.zeros(1).double(),), (), {})
    assert launched[-1] == (4, 2)  # another dtype: compiled


def test_every_launched_kernel_enters_through_pdl_wait() -> None:
    """A kernel launched as a programmatic dependent may start while the kernel before it
    runs: every entry point (a ``@triton.jit(do_not_specialize=...)`` kernel, the ones the
    launcher launches) must take ``PDL`` and call ``ll.enter(PDL)`` before anything else."""
    import ast
    import pathlib

    import logits_gather.sampling.kernels as kernels

    entries = 0
    for path in sorted(pathlib.Path(kernels.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            launched = any(
                isinstance(d, ast.Call) and any(k.arg == "do_not_specialize" for k in d.keywords)
                for d in node.decorator_list
            )
            if not launched:
                continue
            entries += 1
            where = f"{path.name}:{node.name}"
            assert "PDL" in [a.arg for a in node.args.args], f"{where} takes no PDL"
            head = node.body[0]
            doc = isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant)
            body = node.body[1:] if doc else node.body
            first = ast.unparse(body[0])
            assert first == "ll.enter(PDL)", f"{where} starts with {first!r}"
    assert entries >= 24


def test_pairs_only_where_every_row_starts_4_byte_aligned() -> None:
    """Greedy's and top-k's probe writers load int32 words of bfloat16 pairs only where
    every row of the shard starts 4-byte aligned: a misaligned word load faults."""
    from logits_gather.sampling.fused.plans import pairs

    x = torch.randn(4, 10).to(torch.bfloat16)
    assert pairs(x)
    assert not pairs(x[:, 1:9])  # every row 2 bytes past a word
    assert pairs(x[:, 2:10])  # stride 10, rows start 4 bytes in
    assert not pairs(torch.randn(4, 11).to(torch.bfloat16))  # odd stride: odd rows misaligned
    assert not pairs(torch.randn(4, 10))  # float32: no pairs
    assert not pairs(torch.randn(4, 10).half())
