#!/usr/bin/env bash
# `vatic bench` at the released shapes, one after the other: decode, prefill, verification cost, drafter step and
# forced-acceptance rounds. On a GPU the random weights are made in memory on the device (nothing is written but
# each config.json), so every shape runs at its full depth; on the CPU each random checkpoint is written, measured
# and deleted before the next. Output goes to $1 (default: a temporary folder), one log per shape, and the decode
# lines to stdout.
#
#   SHAPES     "config:layers ..." (default: the five released shapes at their full depth)
#   DEVICE     cpu | cuda (default cuda)
#   BENCH_ARGS extra arguments (default: --tokens 64 --reps 3 --max-verify 7 --forced-acceptance 7)
#   QUANTS     "bf16 int8 int4" or a subset (default bf16)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
C=tests/fixtures/configs
SHAPES=${SHAPES:-"$C/gemma-4-E2B-it.json:35 $C/gemma-4-E4B-it.json:42 $C/gemma-4-26B-A4B-it.json:30 \
$C/gemma-4-31B-it.json:60 $C/GLM-4.7-Flash.json:47"}
DEVICE=${DEVICE:-cuda}
BENCH_ARGS=${BENCH_ARGS:-"--tokens 64 --reps 3 --max-verify 7 --forced-acceptance 7"}
QUANTS=${QUANTS:-bf16}
export VATIC_CACHE="$out/cache"
fail=0
for shape in $SHAPES; do
  config=${shape%:*}
  layers=${shape##*:}
  name=$(basename "$config" .json)
  [ "$name" = config ] && name=$(basename "$(dirname "$config")")
  for q in $QUANTS; do
    quant=()
    draft=()
    if [ "$q" != bf16 ]; then
      quant=(--quantize "$q")
      draft=(--draft none)
    fi
    log="$out/$name-$layers-$q.log"
    # shellcheck disable=SC2086
    if "$BUILD/vatic" bench --device "$DEVICE" --random "$config" --layers "$layers" "${quant[@]}" "${draft[@]}" \
      $BENCH_ARGS >"$log" 2>&1; then
      echo "$name ($layers layers, $q): $(grep -E '^model:' "$log" | sed 's/^model: [^(]*//')"
      grep -E '^tg[0-9]|^pp[0-9]' "$log"
    else
      echo "$name ($layers layers, $q): FAILED"
      tail -5 "$log"
      fail=1
    fi
  done
  rm -rf "$VATIC_CACHE"  # on the CPU the next shape needs the disk
done
exit $fail
