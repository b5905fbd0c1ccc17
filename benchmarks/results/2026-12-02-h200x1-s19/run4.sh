#!/usr/bin/env bash
# Session 19, device run 4 (one H200): the timings again, 3bc9da7's library and the new
# one alternating (run 2 and 3's eager numbers came from separate runs); then the
# emulated tp=2 test (min-p handed to the kernels as is).
TAIL=20 . benchmarks/results/2026-12-02-h200x1-s17/common.sh
export TRITON_CACHE_DIR=$PWD/.tcache
PYTHONPATH=$PWD/.s19/old step ops_old_a 120 python3 .s19/ops_time.py old
step ops_new_a 120 python3 .s19/ops_time.py new
PYTHONPATH=$PWD/.s19/old step ops_old_b 120 python3 .s19/ops_time.py old
step ops_new_b 120 python3 .s19/ops_time.py new
CUDA_MODULE_LOADING=EAGER step emulated 330 python3 -m pytest -m gpu -v -x tests/test_sampling_emulated_gpu.py -k "match and 2"
