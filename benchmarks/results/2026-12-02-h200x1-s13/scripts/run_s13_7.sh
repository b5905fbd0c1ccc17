#!/usr/bin/env bash
# session 13 run 7: ncu per-line samples of the writers (one rank, M=64)
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
for k in nucleus_local topk_local topk_probe sample_local; do
  timeout 100 ncu --clock-control none --profile-from-start off -k regex:"^$k" --launch-count 1 \
    --section SourceCounters --import-source yes --page source --print-source cuda,sass --csv \
    python3 .old/ncu_target.py 64 > "$out/src_$k.csv" 2> "$out/src_$k.err"
  echo "$k src rc=$?"; wc -c "$out/src_$k.csv"
done
