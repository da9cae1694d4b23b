#!/usr/bin/env bash
# ctest driver for the JavaScript client tests.
#   run.sh install        npm ci into tests/e2e/node_modules
#   run.sh test CLIENT    node --test CLIENT.test.mjs (starts its own server)
# Exits 77 (ctest skip) when node or npm is missing.
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  install)
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
      echo "SKIP: node and npm are needed for the client end-to-end tests" >&2
      exit 77
    fi
    npm ci --no-audit --no-fund --loglevel=error
    ;;
  test)
    if ! command -v node >/dev/null; then
      echo "SKIP: node is needed for the client end-to-end tests" >&2
      exit 77
    fi
    if [ ! -d node_modules/ollama ] || [ ! -d node_modules/openai ]; then
      echo "SKIP: the clients are not installed (run.sh install failed or was skipped)" >&2
      exit 77
    fi
    if [ "$2" = structured ] && [ ! -d node_modules/ajv ]; then
      echo "SKIP: ajv (the JSON Schema validator) is not installed (run.sh install failed or was skipped)" >&2
      exit 77
    fi
    exec node --test --test-concurrency=1 "$2.test.mjs"
    ;;
  *)
    echo "usage: run.sh install | test CLIENT" >&2
    exit 2
    ;;
esac
