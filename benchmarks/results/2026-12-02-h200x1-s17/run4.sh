#!/usr/bin/env bash
# Session 17, device run 4 (one H200): per-column tickets with ranks sharing the GPU, races.
TAIL=8 . "$(dirname "$0")/common.sh"
step tickets 200 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -v -x tests/test_sampling_emulated_gpu.py -k "take_tickets and 2"
step race 240 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py
