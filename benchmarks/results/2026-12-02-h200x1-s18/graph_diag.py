"""Which top-p captures fail with CUresult 401 (world size 1, one GPU)? (Run as
``.s18/graph_diag.py``; reformatted for ruff here, the same statements; its setup
is ``timing.start`` since session 19. Run 3 ran it with
``calls`` in (1, 2, 3), run 4 with 20 added.)"""

import traceback

import torch
from timing import start

_, dev, n, s = start("29558")
m = 16
x = (torch.randn(m, n, device=dev) * 3).to(torch.bfloat16)
t = torch.full((m,), 0.8, device=dev)
seed = torch.arange(m, device=dev)
pr = torch.full((m,), 0.9, device=dev)
kr = torch.tensor([(0, 50, 20, s.vocab, 1)[i % 5] for i in range(m)], device=dev)
cases = {
    "top_p=0.9": lambda: s.sample(x, t, seed, top_p=0.9),
    "top_p [M]": lambda: s.sample(x, t, seed, top_p=pr),
    "top_k [M] top_p [M]": lambda: s.sample(x, t, seed, top_k=kr, top_p=pr),
}
for name, fn in cases.items():
    fn()
    fn()
    torch.cuda.synchronize()
    for calls in (1, 2, 3, 20):
        for mode in ("global", "thread_local"):
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g, capture_error_mode=mode):
                    outs = [fn() for _ in range(calls)]
                g.replay()
                torch.cuda.synchronize()
                want = fn()
                torch.cuda.synchronize()
                same = torch.equal(outs[-1], want)
                print(f"{name:<20} calls={calls} {mode:<12} ok, replay equal eager: {same}",
                      flush=True)  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                print(f"{name:<20} calls={calls} {mode:<12} FAILED {type(exc).__name__}: "
                      f"{str(exc)[:160]}", flush=True)  # fmt: skip
                tb = traceback.format_exc().splitlines()
                print("   ", " | ".join(line.strip() for line in tb[-8:-1])[:900], flush=True)
                torch.cuda.synchronize()
