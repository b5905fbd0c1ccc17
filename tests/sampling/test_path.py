"""The data path of one ``sampling.sample`` call (world size 1, gloo, CPU: the torch-ops
path, after a first call built the sampler), traced with ``sys.setprofile``.

Every call from one ``logits_gather`` module into another is a step ``(caller, callee)``;
the path is the steps in order, each taken once (a loop's second round takes no new
step: the code's call sites, not the loop's iterations). A *return* is a step into a
module the path entered before (from another module); a *climb* is a step into a module
still on the stack below (a call back up). The shard should go down through the layers:
at most two returns, no climb. ``raw`` also counts every step of every round."""

from __future__ import annotations

import sys

import torch

from scripts.support.dist import run_ranks

MOST_RETURNS = 2


def path(calls: list[tuple[str, list[str]]], raw: bool = False) -> tuple[list[str], int, int]:
    """``(modules entered in order, returns, climbs)`` of ``calls``, each the callee's
    module and the ``logits_gather`` modules of the frames below it (nearest first)."""
    seq: list[str] = []
    taken: set[tuple[str, str]] = set()
    returns = climbs = 0
    for module, stack in calls:
        caller = stack[0] if stack else ""
        if caller == module or (not raw and (caller, module) in taken):
            continue
        taken.add((caller, module))
        if module in seq:
            returns += 1
            climbs += module in stack
        seq.append(module)
    return seq, returns, climbs


def _trace(rank: int, world: int) -> tuple[list[str], int, int]:
    from logits_gather import sampling

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 256, generator=gen).to(torch.bfloat16)
    t, seed = torch.full((4,), 0.8), torch.arange(4)
    kw = {"top_k": 50, "top_p": 0.9, "min_p": 0.05}
    sampling.sample(x, t, seed, **kw)  # builds the sampler and its exchanges
    calls: list[tuple[str, list[str]]] = []

    def profile(frame, event, _arg) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("logits_gather"):
            return
        stack, f = [], frame.f_back
        while f is not None:
            below = f.f_globals.get("__name__", "")
            if below.startswith("logits_gather"):
                stack.append(below)
            f = f.f_back
        calls.append((module, stack))

    sys.setprofile(profile)
    try:
        sampling.sample(x, t, seed, **kw)
    finally:
        sys.setprofile(None)
    sampling.free_samplers()
    return path(calls), path(calls, raw=True)


def test_path_counter_counts() -> None:
    """The counter can fail: a path that goes back up, or into a module from a second
    one, is counted; a loop's rounds count once, unless ``raw``."""
    down = [("a", []), ("b", ["a"]), ("c", ["b", "a"]), ("b", ["a"]), ("c", ["b", "a"])]
    assert path(down) == (["a", "b", "c"], 0, 0)
    assert path(down, raw=True) == (["a", "b", "c", "b", "c"], 2, 0)
    back = [("a", []), ("b", ["a"]), ("a", ["b", "a"]), ("c", ["a"]), ("b", ["c", "a"])]
    assert path(back) == (["a", "b", "a", "c", "b"], 2, 1)


def test_sample_goes_down_the_layers() -> None:
    [((seq, returns, climbs), raw)] = run_ranks(_trace, 1)
    short = [m.removeprefix("logits_gather.") for m in seq]
    print(f"\n{len(set(seq))} modules, {returns} returns, {climbs} climbs "
          f"(raw: {raw[1]} returns, {raw[2]} climbs):", " > ".join(short))  # fmt: skip
    assert returns <= MOST_RETURNS and climbs == 0, short
