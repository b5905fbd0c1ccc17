#!/usr/bin/env bash
# session 13 run 1: 16-warp nucleus_final diagnosis
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD CUDA_MODULE_LOADING=EAGER
ITERS=6 timeout 300 python3 .old/w16.py "$out" > "$out/w16.txt" 2>&1
echo "rc=$?"; tail -40 "$out/w16.txt"
