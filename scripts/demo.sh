#!/usr/bin/env bash
# Creates the bundled demo model (a small Gemma 4 and its MTP drafter, models/demo/) in the store if it is not
# there yet, starts a vatic server on a free local port for the duration of the demo, and runs a prompt with
# speculative decoding and verbose statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VATIC="$BUILD/vatic"
MODEL=${VATIC_DEMO_MODEL:-gemma4-demo}
PROMPT=${1:-"It is a truth universally acknowledged, that"}

if ! "$VATIC" show "$MODEL" >/dev/null 2>&1; then
  echo "Creating $MODEL from models/demo/Modelfile"
  "$VATIC" create "$MODEL" -f models/demo/Modelfile
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
       echo 11499)
export VATIC_HOST="127.0.0.1:$port"
log=$(mktemp)
"$VATIC" serve >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  if "$VATIC" ps >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then cat "$log"; exit 1; fi
  sleep 0.1
done

echo ">>> $PROMPT"
"$VATIC" run "$MODEL" --verbose "$PROMPT"
