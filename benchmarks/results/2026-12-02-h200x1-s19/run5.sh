#!/usr/bin/env bash
# Session 19, device run 5 (one H200): the sampling timeout tests (no MPS) on this code.
TAIL=30 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
LOGITS_GATHER_NO_MPS=1 step timeout 230 bash scripts/gpu-tests.sh tests/test_sampling_timeout_gpu.py
