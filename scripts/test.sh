#!/usr/bin/env bash
# Runs every test (unit, parity, end-to-end) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" "$@"
