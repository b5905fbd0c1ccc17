#!/usr/bin/env bash
# Session 15, run 3: timeout, race and two-rank one-GPU tests, then the eager colocated
# sampling benchmark (two ranks sharing the H200 under MPS).
. .s15/common.sh
step timeout 90 env LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh tests/test_sampling_timeout_gpu.py
step race 80 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py
step onegpu 200 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py
export CUDA_MPS_PIPE_DIRECTORY=/tmp/lg-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/lg-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
step eager 120 python3 -m logits_gather.bench.sampling --device cuda --world-size 2 --rows 1,4,16,32,64 --reps 5 --out $o/eager
echo quit | nvidia-cuda-mps-control
