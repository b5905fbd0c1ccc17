#!/usr/bin/env bash
. .s14/common.sh
step host_new 45 python3 scripts/sampling-host-cost.py
step host_old 45 python3 .s14/host_old.py
