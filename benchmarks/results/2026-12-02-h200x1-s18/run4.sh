#!/usr/bin/env bash
# Session 18, device run 4 (one H200): IF nodes on the Conditional's own side streams:
# captures of 1 to 20 top-p calls, graph µs of a per-row k with top-p, the graph tests.
TAIL=40 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
step graph_diag 150 python3 .s18/graph_diag.py
step rowkp_new 100 python3 .s18/rowkp_time.py new
step conditional 60 bash scripts/gpu-tests.sh tests/test_conditional_gpu.py
LOGITS_GATHER_TIMEOUT_S=20 step graph_test 200 bash scripts/gpu-tests.sh -x -k "graph and one-gpu" tests/test_sampling_gpu.py
