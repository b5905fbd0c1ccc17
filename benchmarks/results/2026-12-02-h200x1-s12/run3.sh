#!/usr/bin/env bash
# session 12 run 3: 5-way cut, one logprobs poll, FULL topk_local vs cd6da69; topk_local 16 warps; emulated, race
set -u
out=$1
export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD timeout 115 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_new.txt" 2>&1
echo "times_new rc=$?"
(cd .old/head && PYTHONPATH=$PWD timeout 115 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_head.txt" 2>&1; echo "times_head rc=$?")
for f in new head; do grep -E "^M=(1|64) " "$out/times_$f.txt" | grep -E "sample_k50 |sample_p90 \(fused\)|logprobs_n5|logprobs " > "$out/m_$f.txt"; done
paste -d'\n' "$out/m_head.txt" "$out/m_new.txt"
export PYTHONPATH=$PWD
timeout 170 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q -n 3 tests/test_sampling_emulated_gpu.py > "$out/emulated.txt" 2>&1
echo "emulated rc=$?"; tail -2 "$out/emulated.txt"
timeout 100 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py > "$out/race.txt" 2>&1
echo "race rc=$? $(grep -E '^(FAILED|PASSED)' "$out/race.txt" | head -3 | tr '\n' ' ')"
sed -i 's/fused._local(fused.t.topk_local, shard, (t, low, flags), "sample_k", kp, (), {"KP": kp})/fused._local(fused.t.topk_local, shard, (t, low, flags), "sample_k", kp, (), {"KP": kp}, 16)/' logits_gather/sampling/fused_filters.py
grep -c '{"KP": kp}, 16)' logits_gather/sampling/fused_filters.py
timeout 80 python3 scripts/sampling-kernel-times.py --rows 1,64 --kernels > "$out/times_topk16.txt" 2>&1
echo "topk16 rc=$?"; grep -E "^M=(1|64) sample_k50 " "$out/times_topk16.txt"
