#!/usr/bin/env bash
# Session 18, device run 3 (one H200): which top-p graph captures fail (CUresult 401 in
# run 2's timing script), and the emulated tp=2 match test with the per-row k + top-p case.
TAIL=40 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
step graph_diag 90 python3 .s18/graph_diag.py
CUDA_MODULE_LOADING=EAGER step emulated 420 python3 -m pytest -m gpu -v -x tests/test_sampling_emulated_gpu.py -k "match and 2"
