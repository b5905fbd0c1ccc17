#!/usr/bin/env bash
# Session 15, run 5: the per-row top-k's pick as one kernel (pick.py). Two-rank one-GPU
# sampler tests (per-row top_k cases included), then kernels per eager call.
. .s15/common.sh
step onegpu 230 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py
step launches 90 python3 scripts/sampling-launch-count.py --rows 4,128
