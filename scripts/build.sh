#!/usr/bin/env bash
# Configure and build into a build directory.
# usage: build.sh [--sanitize address,undefined|thread] -> prints the build dir
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sanitize=""
if [ "${1:-}" = "--sanitize" ]; then sanitize=${2:?--sanitize needs a value}; fi
dir="$top/build${sanitize:+-${sanitize//,/-}}"
cmake -S "$top" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINKPASS_SANITIZE="$sanitize" >/dev/null
cmake --build "$dir" -j"$(nproc)" >&2
echo "$dir"
