#!/usr/bin/env bash
# Session 14, run 1: one H200. Kernel times (one vs two launches), host cost, emulated
# tests, two-rank one-GPU tests.
. .s14/common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
step times 120 python3 scripts/sampling-kernel-times.py --rows 1,16,64
step host 70 python3 scripts/sampling-host-cost.py --profile
step emulated 230 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -x -n 3 tests/test_sampling_emulated_gpu.py
step onegpu 150 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py
