#!/usr/bin/env bash
# Runs the GPU tests (pytest -m gpu). Ranks that share a GPU (every test on one
# GPU, the "spread" placements on several) need an MPS daemon to run side by
# side (without it they time-slice and the tests take far longer), so one is
# started unless LOGITS_GATHER_NO_MPS=1. Extra arguments go to pytest.
set -u
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
started_mps=0
if command -v nvidia-cuda-mps-control >/dev/null && [ "${LOGITS_GATHER_NO_MPS:-0}" != 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/lg-mps-pipe}
  export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/lg-mps-log}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && started_mps=1 && echo "gpu-tests: started an MPS daemon"
fi
# Quit the daemon this script started however it ends, a time limit's SIGTERM included,
# so that no later run meets a daemon left over from a killed one.
trap 'if [ "$started_mps" = 1 ]; then echo quit | nvidia-cuda-mps-control; fi' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
python3 -m pytest -m gpu -v -rA "$@"
