#!/usr/bin/env bash
# session 13 run 4: top-k compact final: A/B kernel times (HEAD tree in .old/head vs working tree), emulated tests
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
root=$PWD
(cd .old/head && PYTHONPATH=$PWD timeout 150 python3 scripts/sampling-kernel-times.py --rows 1,64,256 --kernels > "$out/times_head.txt" 2>&1; echo "head rc=$?")
PYTHONPATH=$root timeout 150 python3 scripts/sampling-kernel-times.py --rows 1,64,256 --kernels > "$out/times_new.txt" 2>&1; echo "new rc=$?"
grep -E "sample_k50|topk" "$out/times_head.txt" | head -20; echo ---; grep -E "sample_k50|topk" "$out/times_new.txt" | head -20
PYTHONPATH=$root CUDA_MODULE_LOADING=EAGER timeout 280 python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated.txt" 2>&1
echo "emulated rc=$?"; tail -5 "$out/emulated.txt"
