#!/usr/bin/env bash
# Session 16, run 2 (same start as run 1): the emulated ticket test run 1's step limit cut,
# the sampler at world size 1 on its GPU (M up to 256, by ticket above ticket_rows) and
# two ranks sharing it; graph-replay kernel times (by program id and by ticket).
. .s16/common.sh
step tickets2 170 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -v -x --durations=0 "tests/test_sampling_emulated_gpu.py::test_emulated_ranks_take_tickets[2]"
step onegpu 250 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x --durations=0 -k "one_rank or one-gpu" tests/test_sampling_gpu.py
step ktimes 170 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256
