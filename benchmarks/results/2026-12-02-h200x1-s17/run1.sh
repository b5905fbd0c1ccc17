#!/usr/bin/env bash
# Session 17, device run 1 (one H200): exactness with per-row k off rows (rowk.py) and
# per-column tickets, launch counts, kernel times.
TAIL=25 . "$(dirname "$0")/common.sh"
export TRITON_CACHE_DIR=$PWD/.tcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
git log --oneline -1
step exact 170 python3 scripts/sampling-exact-check.py
step exact_tickets 120 python3 scripts/sampling-exact-check.py --tickets
step launches 100 python3 scripts/sampling-launch-count.py --rows 4,128,256
step times 170 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256
