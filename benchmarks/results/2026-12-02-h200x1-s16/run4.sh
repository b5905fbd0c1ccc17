#!/usr/bin/env bash
# Session 16, run 4 (same start as run 3; given as one command line): the world-1 sampler
# test and the emulated tp=2 ticket test, each alone, on run 3's warmed Triton cache.
. .s16/common.sh; step onerank 150 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x --durations=0 -k "one_rank" tests/test_sampling_gpu.py; step tickets2 125 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -v -x --durations=0 "tests/test_sampling_emulated_gpu.py::test_emulated_ranks_take_tickets[2]"
