#!/usr/bin/env bash
# Session 17, device run 3 (one H200): world 1 up to M=256 (tickets), timeouts without MPS.
TAIL=12 . "$(dirname "$0")/common.sh"
export TRITON_CACHE_DIR=$PWD/.tcache
ls .tcache 2>/dev/null | wc -l
step one_rank 420 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k one_rank tests/test_sampling_gpu.py
step timeout 110 env LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh tests/test_sampling_timeout_gpu.py
