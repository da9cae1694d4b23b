#!/usr/bin/env bash
# Packs built binaries for a machine that has the GPU driver and CUDA runtime but not the libraries vatic builds
# against (see docs/gpu.md): OUT/<path> keeps each binary's path under the build folder (a wrapper that sets
# LD_LIBRARY_PATH), OUT/.bin/ the stripped binaries, OUT/.lib/ every shared library they link except glibc, the
# C++ runtime and CUDA's own. Usage: scripts/pack-binaries.sh OUT build/vatic build/tests/test_models ...
set -euo pipefail
out=$1
shift
mkdir -p "$out/.bin" "$out/.lib"
for b in "$@"; do
  rel=${b#*/}  # path under the build folder
  name=$(basename "$b")
  strip --strip-all -o "$out/.bin/$name" "$b"
  mkdir -p "$out/$(dirname "$rel")"
  up=.
  [[ $(dirname "$rel") == . ]] || up=$(dirname "$rel" | sed 's|[^/][^/]*|..|g')
  printf '#!/bin/bash\nd=$(cd "$(dirname "$0")/%s" && pwd)\nLD_LIBRARY_PATH="$d/.lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/.bin/%s" "$@"\n' \
    "$up" "$name" >"$out/$rel"
  chmod +x "$out/$rel"
  ldd "$b" | awk '/=> \//{print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libmvec.so* | libpthread* | libdl.so* | librt.so* | ld-linux* | libstdc++* | libgcc_s* | libcuda.so* | \
        libcudart* | libcublas* | libnvidia* | libnvrtc*) ;;
      *) cp -n "$lib" "$out/.lib/" ;;
    esac
  done
done
du -sh "$out"
