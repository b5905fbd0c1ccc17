#!/usr/bin/env bash
# Session 14, run 2: emulated tests (warm fixed), kernel times (logprobs fixed), host cost,
# eager colocated sampling benchmark with one launch on / off.
. .s14/common.sh
step emulated 200 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -x -n 3 tests/test_sampling_emulated_gpu.py
step times 60 python3 scripts/sampling-kernel-times.py --rows 1,16,64
step host 40 python3 scripts/sampling-host-cost.py
export CUDA_MPS_PIPE_DIRECTORY=/tmp/lg-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/lg-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
step eager_one 140 python3 -m logits_gather.bench.sampling --device cuda --world-size 2 --rows 1,4,16,64 --reps 5 --out $o/eager_one
step eager_two 130 env LOGITS_GATHER_SAMPLING_SINGLE=0 python3 -m logits_gather.bench.sampling --device cuda --world-size 2 --rows 1,4,16,64 --reps 5 --out $o/eager_two
echo quit | nvidia-cuda-mps-control
