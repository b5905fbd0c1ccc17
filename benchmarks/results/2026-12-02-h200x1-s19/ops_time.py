"""Sampling filters through the public API, world size 1, one GPU: eager µs per call
(synchronised, median of 40) and graph replay µs per call (20 calls per graph, median of
10 replays), for the code on PYTHONPATH: a scalar top_k=300 (with top_p), a per-row
min_p (alone, with a per-row top_k, with top_p). (Run as ``.s19/ops_time.py``, with
the setup, inputs and timing loop inline; imported from session 18's ``timing.py`` here.)"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-12-02-h200x1-s18"))
from timing import inputs, report, start  # noqa: E402

label, dev, n, s = start("29558")


def ops(m):
    x, t, seed, koff = inputs(s, dev, n, m)
    mpr = torch.tensor([(0.05, 0.0, 0.1, 0.02)[i % 4] for i in range(m)], device=dev)
    return {
        "top_k=300": lambda: s.sample(x, t, seed, top_k=300),
        "top_k=300, top_p=0.9": lambda: s.sample(x, t, seed, top_k=300, top_p=0.9),
        "min_p [M]": lambda: s.sample(x, t, seed, min_p=mpr),
        "top_k [M], min_p [M]": lambda: s.sample(x, t, seed, top_k=koff, min_p=mpr),
        "top_p=0.9, min_p [M]": lambda: s.sample(x, t, seed, top_p=0.9, min_p=mpr),
    }


report(label, s, ops)
