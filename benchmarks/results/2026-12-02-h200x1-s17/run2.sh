#!/usr/bin/env bash
# Session 17, device run 2 (one H200): the sampler's GPU tests on this code.
TAIL=15 . "$(dirname "$0")/common.sh"
export TRITON_CACHE_DIR=$PWD/.tcache
git log --oneline -1
step tests 330 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k "one_rank or one-gpu" tests/test_sampling_gpu.py
step timeout 230 bash scripts/gpu-tests.sh tests/test_sampling_timeout_gpu.py
