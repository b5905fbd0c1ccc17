#!/usr/bin/env bash
# Session 19, device run 7 (one H200): the world-size-1 sampler test (ran as one command
# line).
TAIL=12 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
LOGITS_GATHER_TIMEOUT_S=20 step one_rank 245 bash scripts/gpu-tests.sh -x -k one_rank tests/test_sampling_gpu.py
