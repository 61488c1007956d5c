#!/usr/bin/env bash
# Set up (Debian packages), build and run the whole test suite.
# usage: scripts/test.sh [--sanitize address,undefined|thread] [ctest args...]
set -euo pipefail
here=$(dirname "$0")
bash "$here/setup.sh"
args=()
if [ "${1:-}" = "--sanitize" ]; then args=(--sanitize "$2"); shift 2; fi
dir=$(bash "$here/build.sh" "${args[@]}")
cd "$dir"
ctest -j"$(nproc)" --output-on-failure --timeout 900 "$@"
