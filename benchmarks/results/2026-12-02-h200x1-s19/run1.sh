#!/usr/bin/env bash
# Session 19, device run 1 (one H200): min-p's threshold in the kernels against the
# definition's over every fp32 in [0, 1]; exactness on adversarial rows (subnormal min-p
# rows added); kernels per eager call (per-row min_p without torch's log; int top_k=300).
# It ran a first version of the kernels and of scripts/min-p-log-check.py (README).
TAIL=25 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
git log --oneline -1; git status --short | head -30
step minp_log 150 python3 scripts/min-p-log-check.py
step exact 300 python3 scripts/sampling-exact-check.py
step launches 120 python3 scripts/sampling-launch-count.py --rows 4,128,256
