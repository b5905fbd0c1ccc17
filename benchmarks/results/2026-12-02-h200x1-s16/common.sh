#!/usr/bin/env bash
# Session 16: shared helpers of the run scripts (one H200).
set -u
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TRITON_CACHE_DIR=$PWD/.tcache
o=${OUT:-/tmp/out}
step() { local name=$1 limit=$2; shift 2; echo "=== $name ($(date -u +%T))";
  timeout "$limit" "$@" >"$o/$name.txt" 2>&1; local rc=$?; tail -n 40 "$o/$name.txt"; echo "=== $name rc=$rc ($(date -u +%T))"; }
