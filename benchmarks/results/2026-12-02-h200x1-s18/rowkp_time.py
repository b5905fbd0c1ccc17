"""Per-row top_k with top_p through the public API, world size 1, one GPU: eager µs per
call (synchronised, median of 40) and graph replay µs per call (20 calls per graph, median
of 10 replays), for the code on PYTHONPATH. Also scalar top_k=50+top_p and top_p alone.
(Run as ``.s18/rowkp_time.py``; reformatted for ruff here, the same statements, its
setup, inputs and timing loop moved to ``timing.py`` in session 19.)"""

import torch
from timing import inputs, report, start

label, dev, n, s = start("29557")


def ops(m):
    x, t, seed, koff = inputs(s, dev, n, m)
    pr = torch.tensor([(0.9, 1.0, 0.5, 0.7)[i % 4] for i in range(m)], device=dev)
    return {
        "top_k [M], top_p [M]": lambda: s.sample(x, t, seed, top_k=koff, top_p=pr),
        "top_k=50, top_p=0.9": lambda: s.sample(x, t, seed, top_k=50, top_p=0.9),
        "top_p [M]": lambda: s.sample(x, t, seed, top_p=pr),
    }


report(label, s, ops)
