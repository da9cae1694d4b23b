#!/usr/bin/env bash
# Import speed of `vatic create` against `openssl dgst -sha256` on the same bytes, in one run.
# Usage: bench/import_speed.sh VATIC MODEL_DIR [REPS]
#   MODEL_DIR: a Hugging Face directory (config.json + model.safetensors), e.g. from bench/make_random_gemma4.py.
# Each import goes into a fresh store (so nothing is deduplicated) under $TMPDIR; source files are read once first
# so every tool finds them in the page cache. Prints the best of REPS (default 3) per line, in MB/s of source bytes.
set -euo pipefail
VATIC=$(realpath "$1")
SRC=$(realpath "$2")
REPS=${3:-3}
bytes=$(du -cb "$SRC"/*.safetensors | tail -1 | cut -f1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$SRC"/*.safetensors >/dev/null
# RENDERER raw: a random checkpoint's chat template (or a tokenizer borrowed for it) need not be one vatic renders;
# the renderer does not change what an import reads, hashes or writes.
printf 'FROM %s\nRENDERER raw\n' "$SRC" >"$work/Modelfile"
now() { date +%s.%N; }
declare -A secs
for rep in $(seq 1 "$REPS"); do
  t0=$(now); openssl dgst -sha256 "$SRC"/*.safetensors >/dev/null; t1=$(now)
  secs[openssl]+="$(echo "$t1 - $t0" | bc) "
  for q in none int8 int4; do
    rm -rf "$work/store"
    args=(); [ "$q" != none ] && args=(-q "$q")
    t0=$(now); VATIC_MODELS="$work/store" "$VATIC" create bench-import -f "$work/Modelfile" "${args[@]}" >"$work/log" 2>&1 \
      || { tail -5 "$work/log" >&2; exit 1; }; t1=$(now)
    secs[$q]+="$(echo "$t1 - $t0" | bc) "
  done
  echo "rep $rep: ${secs[*]@K}" >&2
done
rm -rf "$work/store"
echo "source: $SRC ($bytes bytes), best of $REPS, load average now $(cut -d' ' -f1-3 /proc/loadavg)"
for k in openssl none int8 int4; do
  python3 - "$k" "$bytes" ${secs[$k]} <<'PY'
import sys
k, n, v = sys.argv[1], int(sys.argv[2]), [float(x) for x in sys.argv[3:]]
label = {"openssl": "openssl dgst -sha256", "none": "vatic create (bf16)", "int8": "vatic create -q int8",
         "int4": "vatic create -q int4"}[k]
print(f"{label:<24} {min(v):7.2f} s  {n / min(v) / 1e6:7.0f} MB/s   (runs: {' '.join(f'{x:.2f}' for x in v)})")
PY
done
