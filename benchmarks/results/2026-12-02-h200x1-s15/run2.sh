#!/usr/bin/env bash
# Session 15, run 2: the emulated tests alone, verbose, with a longer limit (run 1's
# 200 s ended them with nothing printed).
. .s15/common.sh
step emulated 500 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -v -x -n 3 -o faulthandler_timeout=420 tests/test_sampling_emulated_gpu.py
