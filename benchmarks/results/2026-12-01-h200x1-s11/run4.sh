#!/usr/bin/env bash
# session 11 run 4: the final ll.py (broadcast poll for few words, c90 poll otherwise)
set -u
out=$1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for i in 1 2; do
  timeout 120 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py > "$out/race$i.txt" 2>&1
  echo "race$i rc=$? $(grep -E '^(FAILED|PASSED)' "$out/race$i.txt" | head -1)"
done
timeout 110 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times.txt" 2>&1
echo "times rc=$?"
LOGITS_GATHER_TIMEOUT_S=20 timeout 170 bash scripts/gpu-tests.sh -x -k "one-gpu" tests/test_sampling_gpu.py > "$out/graph.txt" 2>&1
echo "graph rc=$?"; grep -E "^(PASSED|FAILED)" "$out/graph.txt"
timeout 150 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated.txt" 2>&1
echo "emulated rc=$?"; tail -2 "$out/emulated.txt"
