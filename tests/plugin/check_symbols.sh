#!/usr/bin/env bash
# The plugin exports exactly ncclNetPlugin_v8..v12 and does not link
# libibverbs (it is dlopen'ed at init).
set -euo pipefail
lib=$1
defined=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort | tr '\n' ' ')
expected="ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 ncclNetPlugin_v8 ncclNetPlugin_v9 "
if [ "$defined" != "$expected" ]; then
  echo "FAIL: exported symbols are: $defined" >&2
  echo "      expected only:        $expected" >&2
  exit 1
fi
others=$(nm -D "$lib" | awk 'NF == 3 && $2 != "U" && $2 != "w" && $2 != "v" {print $3}' | grep -v '^ncclNetPlugin_v\(8\|9\|10\|11\|12\)$' || true)
if [ -n "$others" ]; then
  echo "FAIL: unexpected dynamic symbols: $others" >&2
  exit 1
fi
if readelf -d "$lib" | grep NEEDED | grep -q ibverbs; then
  echo "FAIL: $lib links libibverbs; it must dlopen it" >&2
  exit 1
fi
if nm -D --undefined-only "$lib" | grep -q ' ibv_'; then
  echo "FAIL: $lib imports ibv_* symbols directly" >&2
  exit 1
fi
echo "PASS: exports $expected; libibverbs not linked"
