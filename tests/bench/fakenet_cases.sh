#!/usr/bin/env bash
# linkpass-perf end to end over fakenet (a TCP stand-in plugin): every
# collective, every ABI shim, the loader's rules, and every way a run can go
# wrong — wrong data, a dying rank, a stall, a timeout, Ctrl-C, bad flags.
#
# usage: fakenet_cases.sh LINKPASS-PERF LIBFAKENET CASE
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
perf=$1 fakenet=$2 case=$3
out=$(mktemp /tmp/linkpass-perf.XXXXXX)
trap 'rm -f "$out"' EXIT
P=(--plugin "$fakenet" -n 2 -w 1)

fail() { echo "FAIL ($case): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
# run EXPECTED_RC ARGS...: run the driver, keep its output, check the exit code
run() {
  local want=$1
  shift
  echo "+ linkpass-perf $*"
  "$perf" "$@" >"$out" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "exit code $rc, expected $want"
}
expect() { grep -qE -- "$1" "$out" || fail "output lacks /$1/"; }

case $case in
ops)
  for op in sendrecv all_reduce all_gather reduce_scatter alltoall; do
    for n in 2 3; do
      for reg in 0 1; do
        run 0 "${P[@]}" --op "$op" -N "$n" -b 0 -e 1M -f 32 -R "$reg" --channels 2 --step-bytes 16K --slots 4 -c 2
        expect "Out of bounds values : 0 OK"
      done
    done
  done
  run 0 "${P[@]}" --op all_reduce -N 4 -b 8 -e 64K -f 4 -d int8 -o max
  # registrations that end inside a page: fakenet checks every handle covers its buffer
  for reg in 0 1; do
    run 0 "${P[@]}" --op all_reduce -N 3 -b 8 -e 1M -f 32 -R "$reg" --reg-pad 64 -c 2
    expect "registrations padded by 64 B"
  done
  run 0 "${P[@]}" --op reduce_scatter -N 4 -b 1K -e 64K -f 8 -d double -o min
  ;;
abi)
  for abi in 8 9 10 11 12; do
    run 0 "${P[@]}" --abi "$abi" -N 2 -b 0 -e 256K -f 8
    expect "ncclNetPlugin_v$abi\)"
  done
  run 0 "${P[@]}" -N 2 -b 8 -e 8
  expect "ncclNetPlugin_v12\)" # newest first
  ;;
loader)
  # NCCL_NET_PLUGIN=fakenet finds libnccl-net-fakenet.so on the search path
  dir=$(dirname "$fakenet")
  echo "+ NCCL_NET_PLUGIN=nothere,fakenet linkpass-perf"
  NCCL_NET_PLUGIN=nothere,fakenet LD_LIBRARY_PATH="$dir" "$perf" -n 1 -w 0 -b 8 -e 8 >"$out" 2>&1 || fail "did not load"
  expect "libnccl-net-fakenet.so"
  NCCL_NET_PLUGIN=nothere "$perf" -n 1 -w 0 -b 8 -e 8 >"$out" 2>&1 && fail "loaded a plugin that is not there"
  expect "dlopen\(nothere\)"
  expect "dlopen\(libnccl-net-nothere.so\)"
  run 2 --plugin "$fakenet" --abi 7 -b 8 -e 8
  expect "must be 8, 9, 10, 11 or 12"
  ;;
late_fill)
  # $fakenet is libnccl-net-fakelate.so here: a v11 table that init fills in
  run 0 --plugin "$fakenet" -n 2 -w 1 -N 2 -b 0 -e 64K -f 8 --op all_reduce
  expect 'name "fakelate", ncclNetPlugin_v11\)'
  expect "Out of bounds values : 0 OK"
  for m in devices test finalize; do
    FAKENET_LATE_NULL=$m run 2 --plugin "$fakenet" -n 1 -w 0 -N 2 -b 8 -e 8
    expect "ncclNetPlugin_v11 has a NULL $m after init"
  done
  ;;
corrupt)
  FAKENET_FAULT_RANK=1 FAKENET_CORRUPT=9 run 1 "${P[@]}" -N 3 -b 1K -e 4K -f 4 -c 2 --rank-env FAKENET_RANK=%r
  expect "element [0-9]+: want"
  expect "Out of bounds values : 1 FAILED"
  ;;
rank_dies)
  FAKENET_FAULT_RANK=2 FAKENET_EXIT=30 run 2 "${P[@]}" -N 3 -b 1K -e 64K -f 4 --rank-env FAKENET_RANK=%r
  expect "rank 2 \(host [^)]*\) exited with code 3: stopping all ranks"
  ;;
stall)
  FAKENET_FAULT_RANK=0 FAKENET_STALL=10 run 2 "${P[@]}" -N 2 -b 1K -e 64K -f 4 --stall-timeout 2 \
    --rank-env FAKENET_RANK=%r
  expect "no progress for 2\.[0-9] s"
  expect "stopping all ranks"
  ;;
timeout)
  start=$(date +%s)
  FAKENET_FAULT_RANK=1 FAKENET_STALL=10 run 2 "${P[@]}" -N 2 -b 1K -e 64K -f 4 --timeout 3 \
    --rank-env FAKENET_RANK=%r
  expect "watchdog: --timeout 3 s expired while all_reduce"
  [ $(($(date +%s) - start)) -le 15 ] || fail "took too long to give up"
  ;;
duration)
  run 0 --plugin "$fakenet" -N 2 --op all_reduce -e 1M --duration 3 --timeout 60
  [ "$(grep -cE '^ +[0-9]+\.0 +[0-9]+ ' "$out")" -ge 2 ] || fail "fewer than 2 per-second lines"
  expect "Wrong elements +: 0 OK"
  ;;
sigint)
  "$perf" --plugin "$fakenet" -N 3 -e 1M --duration 60 --timeout 120 >"$out" 2>&1 &
  pid=$!
  sleep 2
  kill -INT "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" -eq 130 ] || fail "exit code $rc after SIGINT, expected 130"
  expect "interrupted"
  sleep 0.5
  for p in $(sed -nE 's/^#   rank +[0-9]+ pid +([0-9]+).*/\1/p' "$out"); do
    kill -0 "$p" 2>/dev/null && fail "rank process $p survived"
  done
  ;;
badargs)
  run 2 -b garbage
  expect 'invalid size "garbage" for -b'
  run 2 -N 1
  expect "must be between 2 and"
  run 2 --op allreduce
  expect "invalid operation"
  run 2 -b 1M -e 1K
  expect "larger than -e"
  run 2 --fabric x
  expect "--fabric needs --hosts"
  run 2 --bogus
  expect "unknown option"
  ;;
*)
  echo "unknown case $case" >&2
  exit 2
  ;;
esac
echo "PASS ($case)"
