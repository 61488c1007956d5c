# Shared by the operator-facing tests: a private simulated fabric and temp
# directory per test, the checked all_reduce driver in the background, and
# bounded polling.  Everything the test started is stopped, and the fabric
# torn down, however the test ends (trap).
# Needs SIMVERBS, PERF, PLUGIN and CONFS in the environment.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
. "$(dirname "${BASH_SOURCE[0]}")/../lib/poll.sh"  # wait_until, has_line, at_least, prom_sum
: "${SIMVERBS:?}" "${PERF:?}" "${PLUGIN:?}" "${CONFS:?}"

tmp=$(mktemp -d /tmp/lpops.XXXXXX)
# A rate board of its own: the host's default one is shared with every
# test ctest runs beside it, on fabrics whose NICs have the same GUIDs
# (tests/failover/scenario.sh).
export LINKPASS_RATE_BOARD="$tmp/rates"
export SIMVERBS_FABRIC="ops$$"
pids=()     # killed on exit
on_exit=()  # extra commands run on exit, before the fabric goes down
perf=""
ns_prefix=() # the command prefix that runs the launcher (a netns fabric: in node0's namespace)
perf_opts=()

ops_cleanup() {
  local rc=$? p c
  for c in "${on_exit[@]}"; do eval "$c" || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$SIMVERBS" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
  exit "$rc"
}
trap ops_cleanup EXIT

# ctest counts exit status 77 as skipped (SKIP_RETURN_CODE).
skip() {
  echo "SKIP: $*"
  exit 77
}

# Network namespaces with veths and bridges, or skip: they need root.
require_netns() {
  local probe="lpops-probe-$$" err
  [ "$(id -u)" = 0 ] || skip "network namespaces need root (this runs as uid $(id -u))"
  command -v ip >/dev/null || skip "iproute2's ip is not installed"
  err=$(ip netns add "$probe" 2>&1) || skip "cannot create a network namespace: $err"
  err=$(ip -n "$probe" link add lpops-a type veth peer name lpops-b 2>&1 &&
    ip -n "$probe" link add lpops-br type bridge 2>&1) || {
    ip netns delete "$probe"
    skip "cannot create veth or bridge interfaces: $err"
  }
  ip netns delete "$probe"
}

fail() {
  echo "FAIL: $*" >&2
  echo "--- driver output (last 60 lines)" >&2
  tail -n 60 "$tmp/out" >&2 2>/dev/null || true
  for f in "$tmp"/syslog "$tmp"/rsyslog.out; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f")" >&2
    cat "$f" >&2
  done
  exit 1
}

sv() { "$SIMVERBS" "$@" >/dev/null; }

# run_perf SIZE SECONDS: the checked all_reduce, 2 ranks on node0 and node1.
run_perf() {
  local size=$1 secs=$2
  "${ns_prefix[@]}" "$PERF" "${perf_opts[@]}" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 \
    --plugin "$PLUGIN" --op all_reduce -b "$size" -e "$size" --duration "$secs" --timeout $((secs + 60)) \
    >"$tmp/out" 2>&1 &
  perf=$!
  pids+=("$perf")
  wait_until 60 "the first iterations" has_line '^ +1\.0 ' "$tmp/out"
}

# The run finished cleanly with every element right.
expect_clean_run() {
  local rc=0
  wait "$perf" || rc=$?
  perf=""
  ((rc == 0)) || fail "the driver exited with $rc"
  grep -q "Wrong elements *: 0 OK" "$tmp/out" || fail "wrong elements"
}

# A UNIX-socket syslog receiver for tests that do not need rsyslogd.
start_sink() {
  "$SINK" "$tmp/log.sock" "$tmp/syslog" &
  pids+=($!)
  wait_until 5 "the syslog sink listens" test -S "$tmp/log.sock"
  export LINKPASS_SYSLOG_SOCKET="$tmp/log.sock"
}

# Short timers, as in the failover scenarios (a 16.8 ms x 8 retry budget, a
# 500 ms first hold-down), but a 10 s watchdog: these tests count moves
# exactly, and a loaded machine (sanitizers, parallel tests) must not add
# stall moves to those the pulls cause.
export NCCL_IB_TIMEOUT=12 LINKPASS_WATCHDOG_MS=10000 LINKPASS_FAILBACK_HOLDDOWN_MS=500 \
  LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=4000 NCCL_DEBUG=WARN

# metric FILE NAME [DEVICE]: one sample's value ("" when absent).
metric() {
  awk -v n="$2{" -v d="${3:+device=\"$3\"}" \
    'index($1, n) == 1 && (d == "" || index($1, d) > 0) { print $2; exit }' "$1"
}

# Sum of a per-device sample over every metrics file in $tmp.
metric_sum() {
  local f total=0 v
  for f in "$tmp"/*.prom; do
    [ -e "$f" ] || continue
    v=$(metric "$f" "$1" "$2")
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
