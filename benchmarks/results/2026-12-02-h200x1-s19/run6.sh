#!/usr/bin/env bash
# Session 19, device run 6 (one H200): the race test (ran as one command line).
TAIL=12 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
step race 240 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py
