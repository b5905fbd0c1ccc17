#!/usr/bin/env bash
# Session 19, device run 3 (one H200): the public-API GPU sampling tests with two
# processes on the GPU (new filter cases: subnormal min-p rows, int top_k=300) and the
# min-p log test; the timings for 3bc9da7's library.
TAIL=30 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
LOGITS_GATHER_TIMEOUT_S=20 step tests 400 bash scripts/gpu-tests.sh -x -k "one-gpu or min_p_log" tests/test_sampling_gpu.py
PYTHONPATH=$PWD/.s19/old step ops_old 170 python3 .s19/ops_time.py old
