#!/usr/bin/env bash
# GPU run for the sampling work (2 GPUs, one process per GPU where a test allows).
# Usage: bash scripts/sampling-gpu.sh OUT_DIR [STEP ...]
# Steps (default: all, in this order): race, emulated, select, times, tests, timeout,
# graphs, eager, spread. "race", "emulated" and "times" need one GPU only ("race" runs
# its shared-GPU case there, and its per-gpu and spread cases on two GPUs). With one
# process per GPU, eager calls above 66 rows take one launch per round by ticket
# (sampling/single.py): the "tests" step at tp2-per-gpu (M up to 256) and the "eager"
# benchmark (M=256) are where that runs across two GPUs.
set -u
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
out=${1:?usage: sampling-gpu.sh OUT_DIR [STEP ...]}
shift
steps=${*:-race emulated select times tests timeout graphs eager spread}
mkdir -p "$out"
t="tests/test_sampling_gpu.py"
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $* ($(date -u +%T))"
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  tail -n 40 "$out/$name.txt"
  echo "=== $name rc=$rc ($(date -u +%T))"
}
for s in $steps; do
  case $s in
    race) step race 400 bash scripts/gpu-tests.sh tests/test_sampling_race_gpu.py ;;
    times) step times 150 python3 scripts/sampling-kernel-times.py ;;
    tests) step tests 300 env LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh -x \
      -k "tp2-per-gpu or noise or one_rank" "$t" ;;
    timeout) step timeout 200 env LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh \
      tests/test_sampling_timeout_gpu.py ;;
    graphs) step graphs 300 python3 -m logits_gather.bench.sampling --device cuda \
      --world-size 2 --graphs --reps 5 --out "$out/graphs" ;;
    eager) step eager 300 python3 -m logits_gather.bench.sampling --device cuda \
      --world-size 2 --reps 5 --out "$out/eager" ;;
    spread) step spread 560 bash scripts/gpu-tests.sh -x -k "spread or one-gpu" "$t" ;;
    select) step select 200 python3 -m pytest -m gpu -q tests/test_sampling_select_gpu.py ;;
    emulated) step emulated 500 env CUDA_MODULE_LOADING=EAGER python3 -m pytest -m gpu -q \
      -n 3 tests/test_sampling_emulated_gpu.py ;;
    *) echo "unknown step $s" ;;
  esac
done
