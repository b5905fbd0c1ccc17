#!/usr/bin/env bash
# The multi-GPU benchmark run, in one call on a machine with 2+ GPUs, sized to finish in
# about 8 minutes (each step has its own timeout, and all of them share one deadline):
#   1. link topology (nvidia-smi topo -m)                                        ~1 s
#   2. tp=2, one process per GPU, V=151552,129280, bf16, full run               ~1.5-3 min
#   3. sampling benchmark, 2 ranks, CUDA graphs (if the command exists)         ~1-2 min
#   4. MPS daemon up; tp=4 and tp=8 spread over the GPUs (--ranks-per-gpu),
#      --quick, LATENCY ONLY; MPS daemon down                                   ~1-1.5 min each
#   5. the spread target: tp=8 spread graph replay at M=1 vs the tp=2 figure
#   (RUN_GPU_TESTS=1 also runs the GPU tests first; they are not in the time budget.
#    SKIP_SAMPLING=1 leaves step 3 out.)
# Usage: bash scripts/multi-gpu-run.sh OUTDIR   (then copy OUTDIR into
# benchmarks/results/<date>-<gpu>x<n>/). NVLink multicast stays off throughout.
set -u
out=${1:?usage: scripts/multi-gpu-run.sh OUTDIR}
mkdir -p "$out" || exit 2
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
budget_s=${BUDGET_S:-480}
deadline=$((SECONDS + budget_s))
gpus=$(nvidia-smi -L | wc -l)
echo "GPUs: $gpus; budget ${budget_s} s"
[ "$gpus" -ge 2 ] || { echo "needs 2+ GPUs"; exit 2; }

# step NAME LIMIT_S CMD...: runs CMD with stdout/stderr in OUTDIR/log_NAME.{txt,err},
# killed after LIMIT_S or at the shared deadline, whichever comes first
step() {
  local name=$1 limit=$2 left t0=$SECONDS rc
  shift 2
  left=$((deadline - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then echo "== $name: SKIPPED (out of time)"; return 0; fi
  echo "== $name (limit ${limit} s)"
  timeout -k 10 "$limit" "$@" > "$out/log_$name.txt" 2> "$out/log_$name.err"
  rc=$?
  echo "   $name rc=$rc ($((SECONDS - t0)) s)$([ $rc = 124 ] && echo ' TIMED OUT')"
  [ $rc = 0 ] || tail -5 "$out/log_$name.err"
}

nvidia-smi topo -m > "$out/topology.txt" 2>&1
nvidia-smi -L >> "$out/topology.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
  >> "$out/topology.txt" 2>&1

if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  LOGITS_GATHER_NO_MPS=1 bash scripts/gpu-tests.sh > "$out/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -3 "$out/gpu_tests.log"
fi

step bench_tp2 240 python3 -m logits_gather.bench --tp 2 --vocab 151552,129280 --dtype bf16 \
  --stall-timeout 120 --out "$out"
grep -A12 "^targets" "$out/log_bench_tp2.txt"

if [ "${SKIP_SAMPLING:-0}" != 1 ] && python3 -c "import logits_gather.bench.sampling" 2>/dev/null; then
  step sampling_tp2 120 python3 -m logits_gather.bench.sampling --device cuda --tp 2 \
    --out "$out"
  tail -15 "$out/log_sampling_tp2.txt"
fi

export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/lg-mps-pipe}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/lg-mps-log}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
mps=0
if nvidia-cuda-mps-control -d; then
  mps=1; echo "MPS daemon started"
else
  echo "WARNING: could not start an MPS daemon: spread ranks will time-slice"
fi
trap '[ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control' EXIT
for tp in 4 8; do
  per=$((tp / gpus)); [ $((per * gpus)) = "$tp" ] && [ "$per" -ge 2 ] || continue
  step "bench_tp${tp}_spread" 150 python3 -m logits_gather.bench --tp "$tp" \
    --ranks-per-gpu "$per" --vocab 151552 --dtype bf16 --rows 1,8,64 --quick \
    --stall-timeout 90 --out "$out"
  grep -E "^ *1 \||LATENCY ONLY" "$out/log_bench_tp${tp}_spread.txt" | head -4
done
if [ "$mps" = 1 ]; then echo quit | nvidia-cuda-mps-control; mps=0; echo "MPS daemon stopped"; fi

python3 -m logits_gather.bench.gather.spread "$out" | tee "$out/spread_target.txt"
echo "total $SECONDS s; files in $out:"
ls "$out"
