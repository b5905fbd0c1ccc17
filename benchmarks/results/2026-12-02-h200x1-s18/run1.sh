#!/usr/bin/env bash
# Session 18, device run 1 (one H200): exactness of a per-row k with top-p in top-p's
# launches (rowk.nucleus_k_row), launch counts, eager and graph µs of the new routing.
TAIL=25 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
git log --oneline -1; git status --short | head
step exact 280 python3 scripts/sampling-exact-check.py
step launches 100 python3 scripts/sampling-launch-count.py --rows 4,128,256
step rowkp_new 170 python3 .s18/rowkp_time.py new
