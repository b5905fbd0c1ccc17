#!/usr/bin/env bash
# session 13 run 9: the committed ncu scripts, on the new topk_final
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=. timeout 150 ncu --clock-control none --profile-from-start off \
    -k regex:topk_final --launch-count 1 --section SourceCounters \
    --import-source yes --page source --print-source cuda,sass --csv \
    python3 scripts/sampling-ncu-target.py 64 > "$out/lines.csv" 2> "$out/ncu.err"
echo "ncu rc=$?"
python3 scripts/ncu-lines.py "$out/lines.csv" 25 | tee "$out/run9_lines_topk_final.txt"
echo "lines rc=${PIPESTATUS[0]}"
