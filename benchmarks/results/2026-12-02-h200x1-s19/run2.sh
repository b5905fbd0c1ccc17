#!/usr/bin/env bash
# Session 19, device run 2 (one H200): the kernels take min-p's log with plain libdevice
# log (no subnormal branch): libdevice log against torch.log over every fp32 in [0, 1];
# exactness on adversarial rows; eager and graph µs of the changed routes.
TAIL=25 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
git status --short | head -30
step minp_log 120 python3 scripts/min-p-log-check.py
step exact 300 python3 scripts/sampling-exact-check.py
step ops_new 170 python3 .s19/ops_time.py new
