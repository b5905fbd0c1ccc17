#!/usr/bin/env bash
# session 12 run 5: final tree, two ranks sharing the GPU: matches-gathered and graph replay; select
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
LOGITS_GATHER_TIMEOUT_S=20 timeout 230 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py > "$out/graph.txt" 2>&1
echo "graph rc=$?"; grep -E "^(PASSED|FAILED)|passed|failed" "$out/graph.txt" | tail -4
timeout 90 python3 -m pytest -m gpu -q tests/test_sampling_select_gpu.py > "$out/select.txt" 2>&1
echo "select rc=$?"; tail -1 "$out/select.txt"
