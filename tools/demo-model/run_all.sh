#!/usr/bin/env bash
# Reproduces models/demo and tests/fixtures/demo/references.json on a machine with one CUDA GPU.
#   bash tools/demo-model/run_all.sh [WORKDIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="${1:-/tmp/vatic-demo-model}"
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 CUBLAS_WORKSPACE_CONFIG=:4096:8
python3 "$here/train.py" --out "$work"
python3 "$here/references.py" --models "$work" --out "$work/references.json"
echo "trained pair in $work; copy gemma4-demo*/ to $root/models/demo/ and references.json to $root/tests/fixtures/demo/"
