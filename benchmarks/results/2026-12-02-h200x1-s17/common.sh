#!/usr/bin/env bash
# Shared by run1.sh .. run5.sh (sourced): the environment and the step helper, which each
# run script held inline when it ran.
set -u
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
o=$OUT
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $* ($(date -u +%T))"
  timeout "$limit" "$@" >"$o/$name.txt" 2>&1
  local rc=$?
  tail -n "${TAIL:-15}" "$o/$name.txt"
  echo "=== $name rc=$rc ($(date -u +%T))"
}
