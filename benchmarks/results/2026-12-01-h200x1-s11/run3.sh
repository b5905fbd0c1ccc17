#!/usr/bin/env bash
# session 11 run 3: emulated GPU tests, then kernel times with the new ll.py and with c90f403's
set -u
out=$1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
bash scripts/sampling-gpu.sh "$out" emulated > "$out/emulated_step.txt" 2>&1
grep -E "passed|failed|rc=" "$out/emulated_step.txt" | tail -3
timeout 140 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_new.txt" 2>&1
echo "times_new rc=$?"
cp logits_gather/sampling/ll.py /tmp/ll_new.py
cp .old/ll_c90.py logits_gather/sampling/ll.py
timeout 140 python3 scripts/sampling-kernel-times.py --rows 1,16,64,256 --kernels > "$out/times_c90.txt" 2>&1
echo "times_c90 rc=$?"
cp /tmp/ll_new.py logits_gather/sampling/ll.py
