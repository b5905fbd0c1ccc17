#!/usr/bin/env bash
# session 13 run 6: ncu stall reasons and per-line samples of topk_final / nucleus_final (one rank, M=64)
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
timeout 200 ncu --clock-control none --profile-from-start off \
  -k regex:"topk_final|nucleus_final|topk_local|nucleus_local" --launch-count 4 \
  --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
  --csv --page raw python3 .old/ncu_target.py 64 > "$out/stalls.csv" 2> "$out/stalls.err"
echo "stalls rc=$?"; tail -2 "$out/stalls.err"
for k in topk_final nucleus_final; do
  timeout 150 ncu --clock-control none --profile-from-start off -k regex:"$k" --launch-count 1 \
    --section SourceCounters --import-source yes --page source --print-source cuda,sass --csv \
    python3 .old/ncu_target.py 64 > "$out/src_$k.csv" 2> "$out/src_$k.err"
  echo "$k src rc=$?"; tail -2 "$out/src_$k.err"; wc -c "$out/src_$k.csv"; head -c 600 "$out/src_$k.csv"; echo
done
