#!/usr/bin/env bash
# Session 17, device run 5 (one H200): the timeout tests under MPS (trap-stalled skips),
# a repeat of the kernel times.
TAIL=14 . "$(dirname "$0")/common.sh"
step timeout_mps 100 bash scripts/gpu-tests.sh tests/test_sampling_timeout_gpu.py
step times 120 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256
