#!/usr/bin/env bash
# session 13 run 2: replay saved rows through nucleus_final at 8/16/8-maxnreg128/4 warps + instrumented copy
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
timeout 200 python3 .old/nf_debug.py .old/w16 > "$out/nf_debug.txt" 2>&1
echo "rc=$?"; cat "$out/nf_debug.txt" | cut -c1-400
