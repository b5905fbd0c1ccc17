#!/usr/bin/env bash
# session 13 run 5: ncu stall reasons of the fused finals and writers (one rank)
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for M in 64 1; do
  timeout 240 $NCU --clock-control none --profile-from-start off \
    -k regex:"topk_final|nucleus_final|topk_local|nucleus_local|sample_local|sample_final|greedy_final|topk_reduce" \
    --launch-skip 0 --launch-count 40 \
    --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy --section SpeedOfLight \
    --csv --page details python3 .old/ncu_target.py $M > "$out/ncu_M$M.csv" 2> "$out/ncu_M$M.err"
  echo "M=$M rc=$?"; tail -3 "$out/ncu_M$M.err"; wc -l "$out/ncu_M$M.csv"
done
