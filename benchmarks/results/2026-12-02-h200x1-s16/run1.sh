#!/usr/bin/env bash
# Session 16, run 1: one-launch rounds by ticket. Exactness with tickets forced (one rank,
# M=64), emulated tp 2/4/8 (and tickets forced at tp 2/4), kernels per eager call at
# M=4/128/256 (world 1: tickets above ticket_rows).
. .s16/common.sh
step exact 150 python3 scripts/sampling-exact-check.py --tickets
step emulated 330 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -v -x -n 3 tests/test_sampling_emulated_gpu.py
step launches 100 python3 scripts/sampling-launch-count.py --rows 4,128,256
