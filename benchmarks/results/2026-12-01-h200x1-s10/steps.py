"""Session 10: the graph test's first (eager) step on a cold cache, every call snapshotted
on the GPU (no sync): each mailbox's epochs and status, top-p's (need, more) and lam.
Compared across ranks at the end. argv: limit_s [sync_each(0/1)] [steps]."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.getcwd())
from tests.dist import run_ranks  # noqa: E402
from tests.gpu import COLOCATE_ENV, SPILL_TOP_P, adversarial_logits, spill_logits  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")


def _main(rank, world, sync_each, steps):
    import logits_gather.sampling as sampling

    f = open(os.path.join(OUT, f"s_rank{rank}.txt"), "w")
    t0 = time.perf_counter()

    def log(s):
        f.write(f"{time.perf_counter() - t0:8.2f} {s}\n")
        f.flush()

    cpu = os.environ.get("S10_CPU") == "1"
    dev = torch.device("cpu") if cpu else torch.device("cuda", 0)
    if not cpu:
        torch.cuda.set_device(dev)

    def csync():
        if not cpu:
            torch.cuda.synchronize()

    n, m, seed = 4099, 37, 777
    v = n * world
    sampler = sampling.VocabParallelSampler(
        n, 64, device=dev, backend="auto" if cpu else "symm_mem", check_values=False
    )
    import types

    fz = sampler._fused or types.SimpleNamespace(topp_flags=None, spilled=None)
    boxes = sampler._boxes._boxes if sampler._boxes is not None else {}
    full = adversarial_logits(seed, m, n, world, torch.bfloat16, dev)
    gen = torch.Generator(device=dev).manual_seed(seed + 1000)
    shard = full[:, rank * n : (rank + 1) * n].contiguous()
    sharp = full.float().mul(8).nan_to_num(0.0, 0.0, 0.0).to(torch.bfloat16)
    peaked = sharp[:, rank * n : (rank + 1) * n].contiguous()
    u = torch.rand(m, device=dev, generator=gen)
    temp = torch.where(u < 0.2, 0.0, u * 2)
    seeds = torch.randint(-(2**62), 2**62, (m,), device=dev, generator=gen)
    ids = torch.randint(0, v, (m,), device=dev, generator=gen)
    top_k = torch.randint(0, 80, (m,), device=dev, generator=gen)
    top_p = torch.rand(m, device=dev, generator=gen).clamp_(min=0.05)
    min_p = torch.rand(m, device=dev, generator=gen) * 0.2
    ones = torch.ones(m, device=dev)
    spill = spill_logits(m, n, world, torch.bfloat16, dev)
    spilled = spill[:, rank * n : (rank + 1) * n].contiguous()
    calls = [
        ("greedy", lambda: sampler.greedy(shard)),
        ("sample", lambda: sampler.sample(shard, temp, seeds)),
        ("k20", lambda: sampler.sample(shard, temp, seeds, top_k=20)),
        (
            "rowk_p_mp",
            lambda: sampler.sample(shard, temp, seeds, top_k=top_k, top_p=top_p, min_p=min_p),
        ),
        ("p09", lambda: sampler.sample(shard, temp, seeds, top_p=0.9)),
        ("mp", lambda: sampler.sample(shard, temp, seeds, min_p=min_p)),
        ("lp5", lambda: sampler.logprobs(shard, ids, 5)),
        ("peaked_p_mp", lambda: sampler.sample(peaked, temp, seeds, top_p=top_p, min_p=min_p)),
        (
            "k40_p_mp",
            lambda: sampler.sample(shard, temp, seeds, top_k=40, top_p=top_p, min_p=min_p),
        ),
        ("spill", lambda: sampler.sample(spilled, ones, seeds, top_p=SPILL_TOP_P)),
    ]
    snaps = []
    errs = []
    deep = []
    gb = {}
    if sampler._fused is not None:
        og = fz.greedy

        def greedy(x, key=False):
            r = og(x, key)
            if key:
                gb["last"] = r
            return r

        fz.greedy = greedy
        ofinal = fz._final

        def final(fn, m_, mb, tail, consts, warps, geo=None):
            r = ofinal(fn, m_, mb, tail, consts, warps, geo)
            if fn is fz.n.nucleus_final and len(tail) == 9:
                gb["final"] = (m_, mb, tail, consts, warps, geo)
                gb["imm"] = (
                    mb.data.clone(),
                    mb.epoch.clone(),
                    tail[3].clone(),
                    tail[2].clone(),
                    tail[0].clone(),
                )
            return r

        fz._final = final

        def rerun(lam):
            out = []
            imm = gb.pop("imm")
            m_, mb, tail, consts, warps, geo = gb.pop("final")
            for src in ("now", "imm"):
                data, ep = (mb.data, mb.epoch) if src == "now" else imm[:2]
                tl_ = tail if src == "now" else (imm[4], tail[1], imm[3], imm[2], *tail[4:])
                out.append(src + " " + rerun1(lam, m_, mb, data, ep, tl_, consts, warps, geo))
            same = all(
                torch.equal(a, b) for a, b in zip(imm[2:], (tail[3], tail[2], tail[0]), strict=True)
            )
            par = int(mb.epoch[0]) & 1
            a = imm[0].view(2, mb.capacity, -1)[par]
            b = mb.data.view(2, mb.capacity, -1)[par]
            rows = (a != b).any(1).nonzero().flatten().tolist()[:6]
            boxsame = f"{int((a != b).sum())} elements differ in rows {rows}"
            return f"inputs same {same} box same {boxsame}; " + "; ".join(out)

        def rerun1(lam, m_, mb, data, ep, tail, consts, warps, geo):
            """nucleus_final again, on a copy of its mailbox."""
            if tail[6] is not lam:
                return "stash mismatch"
            status = torch.zeros(4, dtype=torch.int32, pin_memory=True)
            fake = types.SimpleNamespace(
                data=data.clone(),
                epoch=ep.clone() - 1,
                parity_stride=mb.parity_stride,
                row_elems=mb.row_elems,
                status_ptr=status.data_ptr(),
                timeout_us=2000,
                check=lambda: None,
            )
            lam2 = torch.full_like(lam, -5)
            flags2 = torch.zeros_like(tail[5])
            t2 = (
                *tail[:4],
                torch.empty_like(tail[4]),
                flags2,
                lam2,
                torch.empty_like(tail[7]),
                tail[8],
            )
            ofinal(fz.n.nucleus_final, m_, fake, t2, consts, warps, geo)
            csync()
            bad = (lam2 != lam).nonzero().flatten().tolist()
            return (
                f"rerun status {status.tolist()} flags {flags2.tolist()} "
                f"lam mismatch rows {bad[:6]} orig {lam[bad[:6]].tolist()} "
                f"rerun {lam2[bad[:6]].tolist()}"
            )

    csync()
    dist.barrier()
    for step in range(steps):
        if errs:
            break
        for name, call in calls:
            fz.topp_flags = fz.spilled = None
            log(f"step {step} {name} >")
            try:
                tok = call()
            except Exception as exc:  # noqa: BLE001
                log(f"step {step} {name} raised {str(exc)[:200]}")
                errs.append(f"{step} {name}: {str(exc)[:200]}")
                break
            log(f"step {step} {name} <")
            s = {w: mb.epoch.clone() for w, mb in boxes.items()}
            fl = None if fz.topp_flags is None else fz.topp_flags.clone()
            lam = None if fz.spilled is None else fz.spilled.clone()
            tk = tok.clone() if isinstance(tok, torch.Tensor) else tok[0].clone()
            snaps.append((step, name, s, fl, lam, tk))
            if lam is not None and "final" in gb:
                csync()
                log(f"step {step} {name} " + rerun(fz.spilled))
            if lam is not None:
                deep.append(
                    (
                        len(snaps) - 1,
                        gb.get("last", lam).clone(),
                        {
                            w: (boxes[w].data.clone(), boxes[w].epoch.clone())
                            for w in (2, 201, 195)
                            if w in boxes
                        },
                    )
                )
            if sync_each:
                csync()
    csync()
    log("synced")
    try:
        sampler.check()
    except Exception as exc:  # noqa: BLE001
        errs.append(str(exc)[:160])
    stat = {w: list(mb._status_words) for w, mb in boxes.items()}
    stat.update({f"x{i}": str(getattr(e, "gather", e)) for i, e in enumerate([])})
    rec = []
    for step, name, s, fl, lam, tk in snaps:
        rec.append(
            (
                step,
                name,
                {w: e.tolist() for w, e in s.items()},
                None if fl is None else fl.tolist(),
                None if lam is None else lam.tolist(),
                tk.tolist(),
            )
        )
    every = [None] * world
    dist.all_gather_object(every, (rec, stat, errs))
    dd = {
        i: (
            g.tolist(),
            {w: (d.view(2, e.numel(), -1).cpu().numpy(), e.tolist()) for w, (d, e) in bx.items()},
        )
        for i, g, bx in deep
    }
    alld = [None] * world
    dist.all_gather_object(alld, dd)
    if rank == 0:
        shown = 0
        for i in sorted(alld[0]):
            if i not in alld[1] or shown >= 2:
                continue
            lams = [every[r][0][i][4] for r in range(world)]
            rows = [j for j in range(m) if lams[0][j] != lams[1][j]]
            if not rows:
                continue
            shown += 1
            j = rows[0]
            log(
                f"DEEP call {every[0][0][i][:2]} row {j} lam {[x[j] for x in lams]} "
                f"gbest {[alld[r][i][0][j] for r in range(world)]}"
            )
            for w in alld[0][i][1]:
                (d0, e0), (d1, e1) = alld[0][i][1][w], alld[1][i][1][w]
                for par in (0, 1):
                    a, b = d0[par, j], d1[par, j]
                    bad = (a != b).nonzero()[0]
                    log(
                        f"  box {w} ep {e0[j]}/{e1[j]} parity {par}: {len(bad)} of {len(a)} "
                        f"elements differ; first {bad[:6].tolist()} "
                        f"r0 {[hex(int(a[k])) for k in bad[:4]]} "
                        f"r1 {[hex(int(b[k])) for k in bad[:4]]}"
                    )
        for r in range(world):
            log(f"rank {r} status {every[r][1]} errs {every[r][2]}")
        for i in range(min(len(x[0]) for x in every)):
            a = [every[r][0][i] for r in range(world)]
            step, name = a[0][0], a[0][1]
            diff = []
            for w in a[0][2]:
                es = [x[2].get(w) for x in a]
                if any(e != es[0] for e in es):
                    rows = [
                        j
                        for j in range(len(es[0]))
                        if any(e is None or e[j] != es[0][j] for e in es)
                    ]
                    diff.append(
                        f"box{w // world} rows {rows[:8]} "
                        + " | ".join(str([e[j] for j in rows[:8]] if e else None) for e in es)
                    )
            fls = [x[3] for x in a]
            lams = [x[4] for x in a]
            lamd = (
                [j for j in range(m) if any(x[j] != lams[0][j] for x in lams)]
                if lams[0] is not None
                else []
            )
            tks = [x[5] for x in a]
            tkd = [j for j in range(len(tks[0])) if any(x[j] != tks[0][j] for x in tks)]
            log(
                f"{step} {name}: tokdiff {tkd[:8]} flags {fls} lamdiff rows {lamd[:8]} "
                f"epochdiff {diff}"
            )
    return errs


if __name__ == "__main__":
    limit = float(sys.argv[1])
    sync_each = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    env = {
        **COLOCATE_ENV,
        "LOGITS_GATHER_SAMPLING_FUSED": "1",
        "LOGITS_GATHER_SAMPLING_FUSED_TOPK": "1",
    }
    try:
        print(run_ranks(_main, 2, sync_each, steps, env=env, timeout=limit))
    except Exception as e:  # noqa: BLE001
        print("FAILED", str(e)[-3000:])
