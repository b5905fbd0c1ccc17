#!/usr/bin/env bash
# session 12 run 1: reciprocal temperature + FULL splits; bits, exactness, A/B kernel times
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
PYTHONPATH=$PWD timeout 100 python3 -m pytest -m gpu -q tests/test_sampling_gpu.py -k "bit_identical" > "$out/bits.txt" 2>&1
echo "bits rc=$?"; tail -3 "$out/bits.txt"
PYTHONPATH=$PWD timeout 130 python3 scripts/sampling-exact-check.py > "$out/exact.txt" 2>&1
echo "exact rc=$?"; tail -6 "$out/exact.txt"
PYTHONPATH=$PWD timeout 115 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_new.txt" 2>&1
echo "times_new rc=$?"
(cd .old/head && PYTHONPATH=$PWD timeout 115 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_head.txt" 2>&1; echo "times_head rc=$?")
grep -E "^(sample|greedy|logprobs|nucleus|topk|scores)[a-z_0-9 ().=]* (local|all) " "$out/times_new.txt" > "$out/sum_new.txt"
grep -E "^(sample|greedy|logprobs|nucleus|topk|scores)[a-z_0-9 ().=]* (local|all) " "$out/times_head.txt" > "$out/sum_head.txt"
paste -d'|' "$out/sum_head.txt" "$out/sum_new.txt"
