#!/usr/bin/env bash
# CI stages after `make test` (.ci/run): the Release configuration must build without warnings, the whole test
# suite runs once more under AddressSanitizer + UndefinedBehaviorSanitizer, and each fuzz target runs briefly.
# Times on the 2-core CI machine are in docs/security.md.
set -euo pipefail
cd "$(dirname "$0")/.."
J=$(nproc)
stage() { echo "=== $* ($(date -u +%H:%M:%S))"; }

stage "Release build (-O3, warnings are errors)"
[[ -f build-release/build.ninja ]] ||
  cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DVATIC_WERROR=ON -DVATIC_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$J"

stage "ASan + UBSan build and test suite"
# Line tables only (-g1): a sanitizer report needs file and line, and full debug info made this tree 4.2 GB,
# more than a CI disk once had free; with -g1 its objects are about 40 % smaller and compile about 25 % faster.
[[ -f build-asan/build.ninja ]] ||
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVATIC_SANITIZE=address,undefined \
    -DVATIC_DEBUG_INFO=-g1 -DVATIC_WERROR=ON -DVATIC_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$J"
# Leak checking stays on; runners are child processes of the server under test and are checked too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
BUILD=build-asan bash scripts/test.sh

stage "fuzz targets (a few seconds each)"
SECONDS_PER_TARGET=${SECONDS_PER_TARGET:-5} bash scripts/fuzz.sh
stage "done"
