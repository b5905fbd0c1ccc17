"""Session 16, run 3: where the emulated tp=2 ticket test stalls. Per call: op, M, seconds,
nonzero mailbox status words. ``TICKET=0``: programs by program id instead."""

import os
import random
import time

import torch

from tests.emulated import Ranks
from tests.test_sampling_emulated_gpu import V, calls

ticket = int(os.environ.get("TICKET", "1"))
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
ranks = Ranks(2, V // 2, 64, dev, ticket_rows=0 if ticket else None, timeout_s=4.0)
most = ranks.fused[0].single_rows
print("ticket", ticket, "single_rows", most, "ticket_rows", ranks.fused[0].ticket_rows, flush=True)
rng = random.Random(5)
for phase in ("warm", "run", "run"):
    m = most if phase == "warm" else rng.randint(1, most)
    for name, call, _want in calls(ranks, rng, m, torch.bfloat16):
        t0 = time.time()
        where = f"{phase} it=0 m={m} {name}"
        try:
            if phase == "warm":
                ranks.warm(call)
            else:
                ranks.run(call, (rng.randrange(2), rng.randrange(0, 200_000)))
            st = [list(b._words) for bs in ranks._boxes.values() for b in bs if b._words[0]]
            print(f"{where}: {time.time() - t0:.2f}s status {st}", flush=True)
        except Exception as e:  # noqa: BLE001 - a diagnostic: report and go on
            print(f"{where}: {time.time() - t0:.2f}s RAISED {str(e)[:200]}", flush=True)
            for bs in ranks._boxes.values():
                for b in bs:
                    b.status.zero_()
