#!/usr/bin/env bash
# session 13 run 3: 16-warp nucleus_final under ptxas opt levels
set -u
out=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD ONLY_REAL=1
for opt in "" "--opt-level 0" "--opt-level 1" "--opt-level 2"; do
  export TRITON_CACHE_DIR=$(mktemp -d)
  echo "### PTXAS_OPTIONS='$opt'"
  PTXAS_OPTIONS="$opt" timeout 100 python3 .old/nf_debug.py .old/w16 2>&1 | grep -E "warps=16|==" | cut -c1-200
done
