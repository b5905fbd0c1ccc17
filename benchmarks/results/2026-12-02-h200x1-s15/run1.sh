#!/usr/bin/env bash
# Session 15, run 1: one launch per round for eager top-k (probe + reduce, overflow +
# final) and min-p. Exactness (one rank, M=64: one launch), emulated tp 2/4/8, kernels per
# eager call, host cost.
. .s15/common.sh
step exact 150 python3 scripts/sampling-exact-check.py
step emulated 200 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -x -n 3 tests/test_sampling_emulated_gpu.py
step launches 90 python3 scripts/sampling-launch-count.py --rows 4,128
step host 60 python3 scripts/sampling-host-cost.py
