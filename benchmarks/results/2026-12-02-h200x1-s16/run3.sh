#!/usr/bin/env bash
# Session 16, run 3: where the emulated tp=2 ticket test stalls (per-call times, 4 s
# waits), tickets on and off; then the world-1 sampler test again (its round-2 flag check
# now needs world >= 2, as spill_logits says).
. .s16/common.sh
step diag1 150 env CUDA_MODULE_LOADING=EAGER TICKET=1 python3 .s16/diag.py
step diag0 70 env CUDA_MODULE_LOADING=EAGER TICKET=0 python3 .s16/diag.py
step onerank 120 env LOGITS_GATHER_TIMEOUT_S=20 bash scripts/gpu-tests.sh -x --durations=0 -k "one_rank" tests/test_sampling_gpu.py
