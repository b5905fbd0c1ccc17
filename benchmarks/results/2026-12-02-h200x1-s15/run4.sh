#!/usr/bin/env bash
# Session 15, run 4: scalar top_p / min_p rows cached (no fill kernel per eager call).
# Kernels per eager call, host cost, then the two-rank one-GPU sampler tests (scalar and
# per-row filters, eager and graph replay).
. .s15/common.sh
step launches 90 python3 scripts/sampling-launch-count.py --rows 4,128
step host 60 python3 scripts/sampling-host-cost.py
step onegpu 200 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py
