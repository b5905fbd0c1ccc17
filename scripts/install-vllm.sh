#!/usr/bin/env bash
# Installs vLLM ${VLLM_VERSION:-0.34.0} into the venv $1 (created or cleared here), then the
# project editable with its test extras. `pip install vllm==0.34.0` fails on CI's package
# index: its pinned dependency flashinfer-python==0.7.3 is not there. So the wheel goes in
# with --no-deps, then every other requirement it declares for the default extra.
# FlashInfer only serves vLLM's GPU sampler paths (unseeded top-k/top-p batches); the CPU
# tests never reach them.
set -euo pipefail
venv=${1:?usage: scripts/install-vllm.sh VENV}
version=${VLLM_VERSION:-0.34.0}
python3 -m venv --clear "$venv"
"$venv/bin/python" -m pip install -q -U pip
"$venv/bin/python" -m pip install -q packaging
"$venv/bin/python" -m pip install -q --no-deps "vllm==$version"
"$venv/bin/python" - <<'PY' > "$venv/vllm-requirements.txt"
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("vllm"):
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() == "flashinfer-python":  # not on the index (see above)
        continue
    print(line.split(";")[0])
PY
"$venv/bin/python" -m pip install -q -r "$venv/vllm-requirements.txt"
# Not ".[vllm]": that extra would send pip after vLLM's requirements again. The plugin's
# entry point is installed with the project whatever the extras.
"$venv/bin/python" -m pip install -q -e ".[test]"
