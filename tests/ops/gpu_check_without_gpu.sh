#!/usr/bin/env bash
# scripts/gpu-check.sh on a machine without an NVIDIA GPU: it must stop
# quickly with exit 2 and say plainly that no GPU is visible, what it looked
# for, and that the other tests need none.  It runs on the tree ctest is
# testing (GPU_CHECK_BUILD_DIR): nothing is built, no fabric is brought up.
# Where a GPU is visible the test is skipped (77): the script would run the
# real check, minutes long.
#
# usage: gpu_check_without_gpu.sh GPU_CHECK_SH BUILD_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
script=${1:?usage: gpu_check_without_gpu.sh GPU_CHECK_SH BUILD_DIR}
build=${2:?usage: gpu_check_without_gpu.sh GPU_CHECK_SH BUILD_DIR}
cuda=${CUDA_HOME:-/usr/local/cuda-13.0}

fail() {
  echo "FAIL: $*" >&2
  echo "--- gpu-check.sh output" >&2
  cat "$tmp/out" >&2 2>/dev/null
  exit 1
}

# A GPU, seen by the driver's tool or by the CUDA runtime: skip.
if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
  echo "SKIP: nvidia-smi -L lists an NVIDIA GPU: this test is for machines without one (run scripts/gpu-check.sh itself)"
  exit 77
fi
smoke=$build/bench/nccl-smoke
if [ -x "$smoke" ] && LD_LIBRARY_PATH=$cuda/lib64:$cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 30 "$smoke" --probe >/dev/null 2>&1; then
  echo "SKIP: nccl-smoke --probe sees an NVIDIA GPU: this test is for machines without one (run scripts/gpu-check.sh itself)"
  exit 77
fi

# Fabrics the script would have made (/dev/shm/simverbs-gpuchk<pid>...).
fabrics() {
  local f n=0
  for f in /dev/shm/simverbs-gpuchk*; do [ -e "$f" ] && n=$((n + 1)); done
  echo "$n"
}

tmp=$(mktemp -d /tmp/lp-gpucheck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
before=$(fabrics)
t0=$(date +%s.%N)
rc=0
OUT=$tmp/logs GPU_CHECK_BUILD_DIR=$build timeout 60 bash "$script" >"$tmp/out" 2>&1 || rc=$?
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "gpu-check.sh: exit $rc in $took s"
cat "$tmp/out"

((rc != 124)) || fail "gpu-check.sh did not finish within 60 s"
((rc == 2)) || fail "gpu-check.sh exited $rc, expected 2 (no NVIDIA GPU)"
awk -v t="$took" 'BEGIN { exit !(t < 30) }' || fail "gpu-check.sh took $took s to say there is no GPU (limit 30 s)"
grep -q "no NVIDIA GPU is visible" "$tmp/out" || fail "no 'no NVIDIA GPU is visible' line"
grep -q "looked for: " "$tmp/out" || fail "the message does not say what was looked for"
grep -q "needs one" "$tmp/out" || fail "the message does not say that the check needs a GPU"
grep -q "other tests do not" "$tmp/out" || fail "the message does not say that the other tests need no GPU"
grep -q "not rebuilding" "$tmp/out" || fail "gpu-check.sh did not take the given build directory"
if [ -x "$smoke" ]; then
  grep -q "nccl-smoke --probe (exit 2): .*no NVIDIA GPU is visible: cudaGetDeviceCount()" "$tmp/out" ||
    fail "the CUDA runtime's answer (nccl-smoke --probe) is not in the message"
fi
[ -f "$tmp/logs/gpu-check.log" ] || fail "no log in OUT ($tmp/logs)"
after=$(fabrics)
((after == before)) || fail "a simulated fabric was brought up (or left behind) without a GPU"
echo "PASS: exit 2 in $took s with a clear message"
