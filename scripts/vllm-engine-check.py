"""Issue 66 on a GPU: a real vLLM engine (V2 runner, TP=1, dummy weights) stock and with the
V2 route (sampling from the shards), through ../shared/tools/vllm-gpu/. NOT YET RUN ON A GPU.

  bash ../shared/tools/vllm-gpu/pack.sh 0.34.0 .vllm-gpu      # on the CPU machine
  # one device call, carry [".vllm-gpu"]:
  source .vllm-gpu/setup.sh && unset VLLM_PLUGINS && \
    python3 scripts/vllm-engine-check.py check --out $OUT/check.json
  ... bench --out $OUT/bench.json [--eager 1] [--reps 3]

Each engine runs in its own child process (``--variant``), all with the plugin loaded:
``stock`` sets ``sampler: false`` (vLLM's sampler; at TP=1 the plugin's gather is vLLM's
path), ``route`` ``sampler: true``, ``route_topk`` adds ``sampler_top_k: true``.

check (eager and CUDA graphs ``FULL_DECODE_ONLY``): greedy, seeded and unseeded
temperature, min-p, a batch mixing them, prompts of different lengths, requests joining
and leaving mid-run -> identical tokens; top-k/top-p -> the share of equal tokens;
logit bias, presence penalty and logprobs=25 -> fallbacks with stock's tokens;
logprobs=5 -> within 1e-5 of stock's; the route's counters -> >= 95% of the steps of
eligible workloads served from the shards.

bench: decode tokens/s and the sampler's device time per step (CUDA events around vLLM's
``Sampler.__call__`` and around the route's sampling), batch 1/16/64/256, ops greedy,
temperature, min-p, top-k, top-p, top-k+top-p, stock and route processes interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

V = 151936
OPS = {
    "greedy": dict(temperature=0.0),
    "temperature": dict(temperature=0.8),
    "min_p": dict(temperature=0.8, min_p=0.05),
    "top_k": dict(temperature=0.8, top_k=50),
    "top_p": dict(temperature=0.8, top_p=0.9),
    "top_k_top_p": dict(temperature=0.8, top_k=50, top_p=0.9),
}
VARIANTS = {
    "stock": {"sampler": False},
    "route": {"sampler": True},
    "route_topk": {"sampler": True, "sampler_top_k": True},
}


def engine(variant: str, eager: bool, max_num_seqs: int = 256):
    from vllm import LLM

    kw = dict(model=os.environ["VLLM_GPU_MODEL"], load_format="dummy", skip_tokenizer_init=True,
              dtype="bfloat16", max_model_len=512, gpu_memory_utilization=0.5, seed=0,
              max_num_seqs=max_num_seqs, enforce_eager=eager, attention_backend="TRITON_ATTN",
              additional_config={"logits_gather": VARIANTS[variant]})  # fmt: skip
    if not eager:
        kw["compilation_config"] = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}
    llm = LLM(**kw)
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker
    return llm, runner.model_runner


def prompts(rng: random.Random, n: int, lo: int = 5, hi: int = 200) -> list[dict]:
    return [{"prompt_token_ids": [rng.randrange(3, V) for _ in range(rng.randrange(lo, hi))]}
            for _ in range(n)]  # fmt: skip


def params(**kw):
    from vllm import SamplingParams

    return SamplingParams(ignore_eos=True, detokenize=False, **({"max_tokens": 24} | kw))


def counts(runner) -> dict:
    s = runner.sampler
    return dict(getattr(s, "counts", {})) | {"fallbacks": dict(getattr(s, "fallbacks", {}))}


def run_check(variant: str, eager: bool) -> dict:
    llm, runner = engine(variant, eager)
    rng, out = random.Random(66), {}

    def gen(name, ps, sps, eligible=True):
        before = counts(runner)
        res = llm.generate(ps, sps, use_tqdm=False)
        after = counts(runner)
        out[name] = {
            "tokens": [list(r.outputs[0].token_ids) for r in res],
            "logprobs": [
                [{str(k): v.logprob for k, v in d.items()} for d in (r.outputs[0].logprobs or [])]
                for r in res
            ],  # fmt: skip
            "steps": {k: after.get(k, 0) - before.get(k, 0) for k in ("shards", "vllm")},
            "eligible": eligible,
        }

    ps = prompts(rng, 32)
    temps = [rng.choice([0.0, 1.0, 0.3, 0.8, 1.3]) for _ in ps]
    gen("greedy", ps, params(temperature=0.0))
    gen("seeded", ps, [params(temperature=t, seed=rng.randrange(2**62)) for t in temps])
    gen("unseeded", ps, [params(temperature=t) for t in temps])
    gen("min_p", ps, [params(temperature=0.9, min_p=0.05, seed=i) for i in range(32)])
    mixed = [params(**(OPS[k] | {"seed": i, "max_tokens": 8 + 3 * i}))
             for i, k in enumerate(["greedy", "temperature", "min_p"] * 11)][:32]  # fmt: skip
    gen("mixed_leaving", ps, mixed)
    gen("logprobs", ps[:8], [params(temperature=0.7, seed=i, logprobs=5) for i in range(8)])
    for op in ("top_k", "top_p", "top_k_top_p"):
        gen(op, ps, [params(**(OPS[op] | {"seed": i})) for i in range(32)], variant == "route_topk")
    gen("logit_bias", ps[:8], params(temperature=0.0, logit_bias={5: 3.0}), False)
    gen("penalty", ps[:8], params(temperature=0.0, presence_penalty=0.5), False)
    gen("logprobs_25", ps[:8], params(temperature=0.0, logprobs=25), False)
    # requests joining mid-run: the engine's own add_request/step loop
    eng, done, joined = llm.llm_engine, {}, 0
    for i in range(4):
        eng.add_request(f"j{i}", ps[i], params(temperature=0.8, seed=100 + i))
    while eng.has_unfinished_requests():
        for r in eng.step():
            if r.finished:
                done[r.request_id] = list(r.outputs[0].token_ids)
        if joined < 4 and len(done) + joined < 8:
            eng.add_request(
                f"k{joined}", ps[8 + joined], params(temperature=0.8, seed=200 + joined)
            )
            joined += 1
    out["joining"] = {"tokens": [done[k] for k in sorted(done)], "eligible": True, "steps": {}}
    return out


def compare(eager: bool, results: dict) -> dict:
    stock, route, topk = (results[v] for v in ("stock", "route", "route_topk"))
    report, served, total = {}, 0, 0
    for name, want in stock.items():
        got, alt = route[name], topk[name]
        mine = alt if name.startswith("top_") else got
        rows = list(zip(mine["tokens"], want["tokens"], strict=False))
        equal = sum(a == b for x, y in rows for a, b in zip(x, y, strict=False))
        n = sum(len(y) for _, y in rows)
        entry = {"equal_tokens": equal, "tokens": n, "steps": mine["steps"]}
        if mine["eligible"] and mine["steps"]:
            served += mine["steps"].get("shards", 0)
            total += sum(mine["steps"].values())
        if want["logprobs"] and any(want["logprobs"]):
            err = [abs(g[k] - w[k]) for G, W in zip(got["logprobs"], want["logprobs"], strict=False)
                   for g, w in zip(G, W, strict=False) for k in w if k in g]  # fmt: skip
            entry["logprob_max_err"] = max(err) if err else None
        report[name] = entry
    report["shard_step_share"] = served / total if total else None
    ok = all(report[k]["equal_tokens"] == report[k]["tokens"] for k in report
             if isinstance(report[k], dict) and not k.startswith("top_"))  # fmt: skip
    lp = report["logprobs"].get("logprob_max_err")
    report["ok"] = bool(
        ok and (lp is None or lp <= 1e-5) and (report["shard_step_share"] or 0) >= 0.95
    )
    return report


def run_bench(variant: str, eager: bool, batches: list[int]) -> dict:
    import torch
    from vllm.v1.worker.gpu.sample.sampler import Sampler

    from logits_gather.vllm.sampler import ShardSampler

    times: list[float] = []

    def timed(fn):
        def wrapper(*a, **k):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = fn(*a, **k)
            end.record()
            times.append((start, end))
            return result

        return wrapper

    Sampler.__call__ = timed(Sampler.__call__)  # the benchmark's harness only
    ShardSampler._sample = timed(ShardSampler._sample)
    llm, runner = engine(variant, eager, max(batches))
    rng, out = random.Random(7), {}
    for b in batches:
        ps = prompts(rng, b, 32, 33)
        for op, kw in OPS.items():
            sps = [params(**(kw | {"seed": i, "max_tokens": 64})) for i in range(b)]
            llm.generate(ps, sps, use_tqdm=False)  # warm-up (Triton JIT)
            times.clear()
            torch.cuda.synchronize()
            t = time.perf_counter()
            res = llm.generate(ps, sps, use_tqdm=False)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t
            n = sum(len(r.outputs[0].token_ids) for r in res)
            step_us = [s.elapsed_time(e) * 1e3 for s, e in times]
            out[f"{op}/b{b}"] = {"tok_s": n / wall, "sampler_us_median": statistics.median(step_us)
                                 if step_us else None, "steps": len(step_us)}  # fmt: skip
    out["counts"] = counts(runner)
    return out


def child(mode: str, variant: str, eager: bool, batches: list[int]) -> None:
    res = run_check(variant, eager) if mode == "check" else run_bench(variant, eager, batches)
    print("RESULT " + json.dumps(res), flush=True)


def spawn(mode: str, variant: str, eager: bool, batches: list[int]) -> dict:
    cmd = [sys.executable, __file__, mode, "--variant", variant, "--eager", str(int(eager)),
           "--batches", ",".join(map(str, batches))]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": proc.returncode, "tail": (proc.stdout + proc.stderr)[-4000:]}


def _write(path: str | None, report: dict) -> str:
    """``report`` as JSON, written to ``path`` (after every engine: a run cut short keeps
    what finished)."""
    text = json.dumps(report, indent=1)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    return text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("check", "bench"))
    ap.add_argument("--variant", default=None, choices=tuple(VARIANTS))
    ap.add_argument("--eager", type=int, default=None, help="one mode only (default: both)")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    batches = [int(x) for x in a.batches.split(",")]
    if a.variant:
        child(a.mode, a.variant, bool(a.eager if a.eager is not None else 1), batches)
        return 0
    report = {}
    for eager in [bool(a.eager)] if a.eager is not None else [True, False]:
        key = "eager" if eager else "graphs"
        if a.mode == "check":
            res = {}
            for v in VARIANTS:
                res[v] = spawn("check", v, eager, batches)
                print(f"{key} {v}: {'error' if 'error' in res[v] else 'done'}", file=sys.stderr)
                _write(a.out, report | {key: {"partial": res}})
            bad = [v for v, r in res.items() if "error" in r]
            report[key] = {"failed": {v: res[v] for v in bad}} if bad else compare(eager, res)
        else:  # interleaved: stock, route, stock, route, ...
            runs = [(rep, v) for rep in range(a.reps) for v in ("stock", "route_topk")]
            report[key] = []
            for r, v in runs:
                report[key].append({"rep": r, "variant": v, **spawn("bench", v, eager, batches)})
                print(f"{key} rep {r} {v}: done", file=sys.stderr)
                _write(a.out, report)
    print(_write(a.out, report))
    return 0 if a.mode == "bench" or all(r.get("ok") for r in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
