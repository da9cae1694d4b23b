#!/usr/bin/env bash
# Installs the Debian packages vatic needs to build and test. Idempotent and quiet when all is present.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libfmt-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev libedit-dev libssl-dev zlib1g-dev
  clang libclang-rt-14-dev
  nodejs npm
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from outside Debian on some machines; accept any working install.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
