#!/usr/bin/env bash
# Session 18, device run 2 (one H200): eager and graph µs of a per-row k with top-p, the
# new routing against f767e37's (9 launches); the public-API GPU tests (tp2-one-gpu).
TAIL=25 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step rowkp_new 120 python3 .s18/rowkp_time.py new
PYTHONPATH=$PWD/.s18/old step rowkp_old 150 python3 .s18/rowkp_time.py old
step rowkp_new2 60 python3 .s18/rowkp_time.py new
LOGITS_GATHER_TIMEOUT_S=20 step tests 240 bash scripts/gpu-tests.sh -x -k "one-gpu" tests/test_sampling_gpu.py
