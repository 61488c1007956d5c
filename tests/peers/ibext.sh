#!/usr/bin/env bash
# The reference IB plugin (NVIDIA/Mellanox nccl-rdma-sharp-plugins, "ibext"),
# unmodified, as a judge of linkpass-perf and of the simulated fabric.
#
# usage: ibext.sh build PEERS_DIR OUTDIR
#          build OUTDIR/libnccl-net-ibext.so with PEERS_DIR/build-ibext.sh,
#          once: a library newer than the script and the tarball is kept
#        ibext.sh run PEERS_DIR SIMVERBS CONFIG IBEXT_SO LINKPASS-PERF [ARGS...]
#          linkpass-perf over IBEXT_SO on a private fabric under plain
#          `simverbs run`; insists on a clean table.  Checks PEERS_DIR
#          first: a skipped build fixture does not stop ctest from
#          starting the tests that need it
#        ibext.sh check PEERS_DIR
#          exit 77 (ctest's skip) naming what is missing, else 0
#
# Exit 77 means "skipped": the peers directory or the CUDA headers the
# reference plugin is built against are not on this machine (CI has both).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL

skip() { echo "SKIP: $*"; exit 77; }

# What building the reference plugin needs, checked the way build-ibext.sh
# looks for it, so a skip names the real reason instead of failing later.
check() {
  local peers=$1 cuda
  [ -f "$peers/build-ibext.sh" ] || skip "no $peers/build-ibext.sh (the peers directory is not on this machine)"
  [ -f "$peers/nccl-rdma-sharp-plugins-2f5ac02.tar.gz" ] || skip "no reference plugin tarball in $peers"
  cuda=${CUDA_HOME:-$(ls -d /usr/local/cuda-* 2>/dev/null | sort -V | tail -1)}
  [ -n "$cuda" ] && [ -f "$cuda/include/cuda.h" ] ||
    skip "no CUDA headers (/usr/local/cuda-*/include/cuda.h or \$CUDA_HOME): the reference plugin needs them to build"
}

cmd=${1:?usage: ibext.sh build|run|check ...}
shift
case $cmd in
check)
  check "${1:?PEERS_DIR}"
  exit 0
  ;;
build)
  peers=${1:?PEERS_DIR} out=${2:?OUTDIR}
  check "$peers"
  so="$out/libnccl-net-ibext.so"
  if [ -f "$so" ] && [ "$so" -nt "$peers/build-ibext.sh" ] &&
    [ "$so" -nt "$peers/nccl-rdma-sharp-plugins-2f5ac02.tar.gz" ]; then
    echo "cached: $so"
    exit 0
  fi
  # build beside the target and rename: a build cut short (timeout, Ctrl-C)
  # never leaves a half-written library that the next run would take as cached
  mkdir -p "$out"
  tmp=$(mktemp -d "$out/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  bash "$peers/build-ibext.sh" "$tmp" || { echo "FAIL: build-ibext.sh failed" >&2; exit 1; }
  mv -f "$tmp/libnccl-net-ibext.so" "$so"
  echo "built: $so"
  exit 0
  ;;
run) ;;
*)
  echo "ibext.sh: unknown command $cmd" >&2
  exit 2
  ;;
esac

check "${1:?PEERS_DIR}"
simverbs=${2:?SIMVERBS} conf=${3:?CONFIG} so=${4:?IBEXT_SO} perf=${5:?LINKPASS-PERF}
shift 5
[ -f "$so" ] || { echo "FAIL: $so is missing: the peers.ibext.build test did not build it" >&2; exit 1; }
fabric="ibx$$r$RANDOM"
out=$(mktemp /tmp/linkpass-ibext.XXXXXX)
cleanup() {
  "$simverbs" down --fabric "$fabric" >/dev/null 2>&1 || true
  rm -f "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$simverbs" up "$conf" --fabric "$fabric" >/dev/null || { echo "FAIL: simverbs up $conf failed" >&2; exit 2; }

# The reference plugin finds each device's PCI path by reading
# /sys/class/infiniband/<dev>/device itself, as NCCL's own IB transport
# does, and crashes in init without it: say so plainly first.
dev=$(awk '$1 == "nic" { print $2; exit }' "$conf")
if ! "$simverbs" run --host "$(awk '$1 == "host" { print $2; exit }' "$conf")" --fabric "$fabric" -- \
  test -e "/sys/class/infiniband/$dev/device"; then
  echo "FAIL: under 'simverbs run', /sys/class/infiniband/$dev/device does not exist: the reference plugin" \
    "needs the simulated host's sysfs at /sys" >&2
  exit 1
fi

# With InfiniBand ports the reference plugin reports maxComms from
# NCCL_SHARP_MAX_COMMS (default 1); NCCL would open no second connection.
export NCCL_SHARP_MAX_COMMS=${NCCL_SHARP_MAX_COMMS:-64}
echo "+ $perf --fabric $fabric --plugin $so $*"
"$perf" --fabric "$fabric" --simverbs "$simverbs" --plugin "$so" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "FAIL: linkpass-perf exited with $rc" >&2; exit 1; }
# the table must come from the reference plugin, with every row checked
grep -q '(name "IBext_v11", ncclNetPlugin_v11)' "$out" || { echo "FAIL: not the reference plugin's v11 table" >&2; exit 1; }
if awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ && $9 != "0" { bad = 1 } END { exit !bad }' "$out"; then
  echo "FAIL: a row reports #wrong != 0" >&2
  exit 1
fi
rows=$(awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/' "$out" | wc -l)
[ "$rows" -gt 0 ] || { echo "FAIL: no result rows" >&2; exit 1; }
grep -q "Out of bounds values : 0 OK" "$out" || { echo "FAIL: no 'Out of bounds values : 0 OK' footer" >&2; exit 1; }
echo "PASS ($rows rows, #wrong 0)"
