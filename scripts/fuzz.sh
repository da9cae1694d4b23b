#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang) and runs each over its seed corpus for SECONDS seconds.
#   scripts/fuzz.sh            # 5 s per target (what CI runs)
#   SECONDS_PER_TARGET=600 scripts/fuzz.sh safetensors tokenizer   # a longer run of some targets
# New inputs a run finds go to build-fuzz/corpus/<target> (not to the committed seeds); a crash leaves
# build-fuzz/crash-* and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUZZ_BUILD:-build-fuzz}
SECS=${SECONDS_PER_TARGET:-5}
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(safetensors config tokenizer modelfile request chat_parser)
if [[ ! -f "$BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S fuzz -B "$BUILD" -G Ninja >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" >/dev/null
for t in "${TARGETS[@]}"; do
  mkdir -p "$BUILD/corpus/$t"
  echo "fuzz: $t for ${SECS}s"
  (cd "$BUILD" && "./fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=4096 -max_len=262144 \
     -print_final_stats=1 "corpus/$t" "../fuzz/corpus/$t" 2>&1 | grep -E "^(stat::number_of_executed_units|stat::new_units_added)|ERROR|SUMMARY" || true)
  if compgen -G "$BUILD/crash-*" >/dev/null || compgen -G "$BUILD/leak-*" >/dev/null ||
     compgen -G "$BUILD/timeout-*" >/dev/null || compgen -G "$BUILD/oom-*" >/dev/null; then
    echo "fuzz: $t found a failure: $(ls "$BUILD"/crash-* "$BUILD"/leak-* "$BUILD"/timeout-* "$BUILD"/oom-* 2>/dev/null)"
    exit 1
  fi
done
echo "fuzz: no failures"
