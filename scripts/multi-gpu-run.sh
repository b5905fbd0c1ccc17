#!/usr/bin/env bash
# Everything the multi-GPU validation needs, in one call on a machine with 2+ GPUs:
# link topology, the GPU test suite (one process per GPU), and the benchmark at
# tp 2, 4 and 8 (as many as the machine has) for V = 151552 and 129280, bf16.
# Usage: bash scripts/multi-gpu-run.sh OUTDIR   (then copy OUTDIR into
# benchmarks/results/<date>-<gpu>x<n>/). NVLink multicast stays off throughout.
set -u
out=${1:?usage: scripts/multi-gpu-run.sh OUTDIR}
mkdir -p "$out"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
gpus=$(nvidia-smi -L | wc -l)
echo "GPUs: $gpus"
nvidia-smi topo -m > "$out/topology.txt" 2>&1
nvidia-smi -L >> "$out/topology.txt"
LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh -k "multi-gpu or wraparound or dead_peer or graph_slots or sampling" \
  > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -3 "$out/gpu_tests.log"
for tp in 2 4 8; do
  [ "$tp" -le "$gpus" ] || break
  python3 -m logits_gather.bench --tp "$tp" --vocab 151552,129280 --out "$out" \
    > "$out/table_tp$tp.txt" 2> "$out/bench_tp$tp.err"
  echo "bench tp=$tp rc=$?"
  grep -A3 "host-cost targets" "$out/table_tp$tp.txt"
done
