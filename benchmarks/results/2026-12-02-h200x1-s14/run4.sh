#!/usr/bin/env bash
# Session 14, run 4: tensors as addresses in every cached launch. Exactness of the
# top-p / top-k / min-p kernels (the generic launcher route), then host cost.
. .s14/common.sh
step exact 150 python3 scripts/sampling-exact-check.py
step host 50 python3 scripts/sampling-host-cost.py
