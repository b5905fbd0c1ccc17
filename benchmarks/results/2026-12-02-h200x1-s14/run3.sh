#!/usr/bin/env bash
# Session 14, run 3 (final tree): timeout, race and two-rank one-GPU tests, emulated
# tests, eager colocated sampling benchmark.
. .s14/common.sh
step timeout 90 env LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh tests/test_sampling_timeout_gpu.py
step race 80 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py
step onegpu 170 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py
step emulated 190 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -x -n 3 tests/test_sampling_emulated_gpu.py
export CUDA_MPS_PIPE_DIRECTORY=/tmp/lg-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/lg-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
step eager 100 python3 -m logits_gather.bench.sampling --device cuda --world-size 2 --rows 1,4,16,64,256 --reps 5 --out $o/eager
echo quit | nvidia-cuda-mps-control
