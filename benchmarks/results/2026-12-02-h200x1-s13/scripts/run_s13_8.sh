#!/usr/bin/env bash
# session 13 run 8: top-k final with one poll for candidates and heads (no per-lane tie/floor):
# A/B kernel times (HEAD tree in .old/head vs working tree), emulated tests, bits, two ranks on one GPU
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
root=$PWD
(cd .old/head && PYTHONPATH=$PWD timeout 150 python3 scripts/sampling-kernel-times.py --rows 1,64,256 --kernels > "$out/times_head.txt" 2>&1; echo "head rc=$?")
PYTHONPATH=$root timeout 150 python3 scripts/sampling-kernel-times.py --rows 1,64,256 --kernels > "$out/times_new.txt" 2>&1; echo "new rc=$?"
(cd .old/head && PYTHONPATH=$PWD timeout 150 python3 scripts/sampling-kernel-times.py --rows 64 --kernels > "$out/times_head2.txt" 2>&1; echo "head2 rc=$?")
for f in times_head times_new times_head2; do echo "== $f"; grep -E "^M=(1|64|256) sample_k50 \(" "$out/$f.txt"; grep -E "^sample_k50.*all" "$out/$f.txt"; done
export PYTHONPATH=$root
CUDA_MODULE_LOADING=EAGER timeout 300 python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated.txt" 2>&1
echo "emulated rc=$?"; tail -3 "$out/emulated.txt"
timeout 60 python3 -m pytest -m gpu -q tests/test_sampling_gpu.py -k bit_identical > "$out/bits.txt" 2>&1
echo "bits rc=$?"; tail -1 "$out/bits.txt"
LOGITS_GATHER_TIMEOUT_S=20 timeout 200 bash scripts/gpu-tests.sh -x -k one-gpu tests/test_sampling_gpu.py > "$out/graph.txt" 2>&1
echo "graph rc=$?"; grep -E "passed|failed" "$out/graph.txt" | tail -2
