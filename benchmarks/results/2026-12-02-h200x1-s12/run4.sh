#!/usr/bin/env bash
# session 12 run 4: final tree vs cd6da69 (times), bits, emulated, race
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD timeout 115 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_new.txt" 2>&1
echo "times_new rc=$?"
(cd .old/head && PYTHONPATH=$PWD timeout 115 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_head.txt" 2>&1; echo "times_head rc=$?")
for f in new head; do grep -E "^[a-z_0-9 ().=]+ all " "$out/times_$f.txt" > "$out/sum_$f.txt"; done
paste -d'|' "$out/sum_head.txt" "$out/sum_new.txt"
grep -E "^M=64 (logprobs_n5|sample_k50|sample_p90 \(fused\)) " "$out/times_new.txt"
export PYTHONPATH=$PWD
timeout 60 python3 -m pytest -m gpu -q tests/test_sampling_gpu.py -k "bit_identical" > "$out/bits.txt" 2>&1
echo "bits rc=$?"; tail -1 "$out/bits.txt"
timeout 170 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated.txt" 2>&1
echo "emulated rc=$?"; tail -2 "$out/emulated.txt"
timeout 100 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py > "$out/race.txt" 2>&1
echo "race rc=$? $(grep -E '^(FAILED|PASSED)' "$out/race.txt" | head -3 | tr '\n' ' ')"
