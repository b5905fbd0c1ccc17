#!/usr/bin/env bash
# session 12 run 2: cd6da69 correctness (race, emulated); then 16-warp finals (times, emulated)
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
timeout 120 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py > "$out/race.txt" 2>&1
echo "race rc=$? $(grep -E '^(FAILED|PASSED)' "$out/race.txt" | head -3 | tr '\n' ' ')"
timeout 170 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated.txt" 2>&1
echo "emulated rc=$?"; tail -2 "$out/emulated.txt"
sed -i 's/^FINAL_WARPS = 8$/FINAL_WARPS = 16/' logits_gather/sampling/fused_filters.py
sed -i 's/_warps(self.cand \* kp, 8))/_warps(self.cand * kp, 16))/' logits_gather/sampling/geometry.py
git diff --stat | tail -3
timeout 100 python3 scripts/sampling-kernel-times.py --rows 1,64 --kernels > "$out/times_w16.txt" 2>&1
echo "times_w16 rc=$?"; grep -E "^M=(1|64) (sample_k50|sample_p90|sample_k50_p90) " "$out/times_w16.txt"
timeout 170 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated_w16.txt" 2>&1
echo "emulated_w16 rc=$?"; tail -2 "$out/emulated_w16.txt"
