#!/usr/bin/env bash
# GPU run for the sampling work (2 GPUs): the fast checks first, then the benchmark,
# then the slower spread placements. Usage: bash scripts/sampling-gpu.sh [OUT_DIR]
set -u
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
out=${1:-benchmarks/results/sampling-h200x2}
mkdir -p "$out"
t="tests/test_sampling_gpu.py"
step() { echo "=== $*"; "$@"; echo "=== rc=$? ($1 ... done $(date -u +%T))"; }
step timeout 300 python3 -m pytest -m gpu -rA -q "$t::test_noise_and_scores_bit_identical"
step timeout 600 python3 -m pytest -m gpu -rA -q -k "tp2-per-gpu" "$t"
step timeout 600 python3 -m logits_gather.bench.sampling --device cuda --world-size 2 --graphs \
  --out "$out"
step timeout 600 python3 -m logits_gather.bench.sampling --device cuda --world-size 2 --out "$out"
step timeout 1500 python3 -m pytest -m gpu -rA -q -k "not tp2-per-gpu and not noise" "$t"
