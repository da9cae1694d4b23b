#!/usr/bin/env bash
# The GPU checks of docs/gpu.md, on a machine with an NVIDIA GPU and a built (or packed) build folder: the op test
# against the CPU backend, the model, engine, cache and quantization suites on cuda, and the demo model through the
# whole product (create, serve, run --verbose, ps) with the server's log. Logs go to $1 (default: a temporary
# folder); SUITES picks the suites (default: all of "ops models engine cache quant server ops-tc engine-tc ops-late
# engine-late"; the -tc suites run with the bf16 GEMV on tensor cores, VATIC_GEMV_TENSOR_CORES=1, the -late ones
# with decode GEMVs loading weights only after the kernel before them, VATIC_GEMV_EARLY=0). Exits non-zero when
# something fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
nvidia-smi -L || true
fail=0
run() {
  local name=$1
  shift
  if "$@" >"$out/$name.log" 2>&1; then
    echo "$name: ok ($(grep -E '^\[  PASSED' "$out/$name.log" | head -1))"
  else
    echo "$name: FAILED"
    grep -E '^\[  FAILED|Failure|error' "$out/$name.log" | head -20
    fail=1
  fi
}
for suite in ${SUITES:-ops models engine cache quant server ops-tc engine-tc ops-late engine-late}; do
  case $suite in
    ops) run ops "$BUILD/tests/test_backend" --gtest_filter='Device*:Moe*:Sampling*' ;;
    ops-tc) VATIC_GEMV_TENSOR_CORES=1 run ops-tc "$BUILD/tests/test_backend" --gtest_filter='Device*:Moe*' ;;
    engine-tc) VATIC_GEMV_TENSOR_CORES=1 VATIC_TEST_DEVICE=cuda run engine-tc "$BUILD/tests/test_engine" ;;
    ops-late) VATIC_GEMV_EARLY=0 run ops-late "$BUILD/tests/test_backend" --gtest_filter='Device*:Moe*' ;;
    engine-late) VATIC_GEMV_EARLY=0 VATIC_TEST_DEVICE=cuda run engine-late "$BUILD/tests/test_engine" ;;
    server) run server "$BUILD/tests/test_server" ;;  # its runners take the first GPU by default
    *) VATIC_TEST_DEVICE=cuda run "$suite" "$BUILD/tests/test_$suite" ;;
  esac
done

export VATIC_MODELS="$out/models"
port=$((20000 + RANDOM % 20000))
export VATIC_HOST="127.0.0.1:$port"
"$BUILD/vatic" create gemma4-demo -f models/demo/Modelfile >"$out/create.log" 2>&1 || { echo "create: FAILED"; fail=1; }
"$BUILD/vatic" serve >"$out/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do "$BUILD/vatic" ps >/dev/null 2>&1 && break; sleep 0.1; done
"$BUILD/vatic" run gemma4-demo --verbose "It is a truth universally acknowledged, that" >"$out/run.log" 2>&1 ||
  { echo "run: FAILED"; fail=1; }
"$BUILD/vatic" ps >"$out/ps.log" 2>&1
kill "$server"
wait "$server" 2>/dev/null
echo "--- run --verbose"; tail -20 "$out/run.log"
echo "--- ps"; cat "$out/ps.log"
echo "--- server log (runner lines)"; grep -E "runner" "$out/serve.log" | head -20
exit $fail
