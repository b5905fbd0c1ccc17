"""Session 10: the shared-GPU graph test with phase stamps and stack dumps per rank."""

from __future__ import annotations

import faulthandler
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from tests.dist import run_ranks  # noqa: E402
from tests.gpu import COLOCATE_ENV  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")


def _wrapped(rank, world, seed, placement, n):
    import logging

    import torch

    from logits_gather.sampling import launcher as L
    from tests import test_sampling_gpu as T

    f = open(os.path.join(OUT, f"g_rank{rank}.txt"), "w")
    t0 = time.perf_counter()

    def log(s):
        f.write(f"{time.perf_counter() - t0:8.2f} {s}\n")
        f.flush()

    h = logging.StreamHandler(f)
    h.setLevel(logging.INFO)
    logging.getLogger("logits_gather").addHandler(h)
    logging.getLogger("logits_gather").setLevel(logging.INFO)
    faulthandler.dump_traceback_later(25, repeat=True, file=f)

    orig_launch = L.Launcher._launch

    def launch(self, fn, grid, args, consts, warps):
        n0 = len(self._cache)
        orig_launch(self, fn, grid, args, consts, warps)
        if len(self._cache) != n0 or self._jit_only:
            cap = torch.cuda.is_current_stream_capturing()
            log(f"jit {getattr(fn, '__name__', fn)} grid {grid} cap {cap}")

    L.Launcher._launch = launch
    orig_load = L.Launcher._load

    def load(self, fn, grid, args, consts, warps):
        log(f"load> {getattr(fn, '__name__', fn)}")
        orig_load(self, fn, grid, args, consts, warps)
        log(f"load< {getattr(fn, '__name__', fn)}")

    L.Launcher._load = load
    G = torch.cuda.CUDAGraph
    for name in ("capture_begin", "capture_end", "replay"):
        o = getattr(G, name)

        def w(self, *a, _o=o, _n=name, **k):
            log(f"{_n}>")
            r = _o(self, *a, **k)
            log(f"{_n}<")
            return r

        setattr(G, name, w)
    osync = torch.cuda.synchronize

    def sync(*a, **k):
        osync(*a, **k)
        log("sync")

    torch.cuda.synchronize = sync
    try:
        r = T._graphs(rank, world, seed, placement, n)
        log(f"result {r}")
        return r
    except BaseException as e:
        log(f"raised {type(e).__name__}: {e}")
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    limit = float(sys.argv[1]) if len(sys.argv) > 1 else 200
    env = {
        **COLOCATE_ENV,
        "LOGITS_GATHER_SAMPLING_FUSED": "1",
        "LOGITS_GATHER_SAMPLING_FUSED_TOPK": "1",
    }
    try:
        print(run_ranks(_wrapped, 2, 12345, "one-gpu", 4099, env=env, timeout=limit))
    except Exception as e:  # noqa: BLE001
        print("FAILED", str(e)[-3000:])
