#!/usr/bin/env bash
# Failover with many connections on one NIC (docs/PERFORMANCE.md, issue 13).
# Two processes on node0 and node1 of the 4-NIC simulated fabric run a
# checked sendrecv over K channels a direction, every channel on mlx5_0
# (linkpass-perf --channels K --same-dev, 1 KiB a channel a message); after
# the first second node0's mlx5_0 cable is pulled once.  Per K it prints the
# longest pause between two completions of a rank and the slowest iteration
# (every channel's message of one repetition) with nothing failing and with
# the pull, the moved connection ends against the 4 K expected, the
# plugin's own move durations (fault seen to traffic flowing, p50 / p99 over
# every end), the same from the pull itself (the cable pulled to each end's
# traffic flowing, the time= of its event line: this counts the time until
# an end sees the fault too, the issue's measure) and the wrong elements.
#
# usage: bench/many_conns.sh BUILD_DIR [K ...]          (default K: 1 16 128 1024)
#   env: DURATION (s a run, default 8; at K = 1024 use 30: the standby paths take 13-18 s to build,
#        and a pull before they are all there moves ends onto new paths), NOFAULT (0: skip the runs without a
#        pull), PULL_AFTER (s to wait before the pull once every end has its
#        standby path, default 0), FAILBACK_AFTER (s
#        after the pull to plug the cable back in, with a 500 ms hold-down:
#        the failback columns, and exit 1 unless every end came back; unset: the cable stays out), BOUND_MS (exit 1
#        when a run's longest pause with the pull is above it: the ctest uses this), FAILBACK_BOUND_MS (exit 1 when
#        the p99 from the plug-in to the failback lines is above it: the ctest uses this too), KEEP (a folder: each run's syslog lines and output
#        are copied there as syslog.K.PULL, out.K.PULL and gaps.K.PULL (the gap log), with pull.K.PULL the pull's time
#        on the gap log's clock, for a closer look), PFREC (a file: perf records
#        every page fault of both ranks, with call chains and wall-clock times, from 0.5 s before the pull
#        for 1.5 s), CPUREC (a file: perf records both ranks' CPU, 1,999 samples a second with call chains,
#        from 0.5 s before the pull for 1 s)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../tests/lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
. "$(dirname "${BASH_SOURCE[0]}")/../tests/lib/poll.sh"  # prom_sum
build=$(cd "${1:?usage: many_conns.sh BUILD_DIR [K ...]}" && pwd)
shift
[ -z "${KEEP:-}" ] || mkdir -p "$KEEP"
ks=("$@")
((${#ks[@]})) || ks=(1 16 128 1024)
top=$(cd "$(dirname "$0")/.." && pwd)
sv="$build/simverbs/simverbs" perf="$build/bench/linkpass-perf" sink="$build/tests/failover/syslog_sink"
plugin=${PLUGIN:-$build/lib/libnccl-net-linkpass.so}
duration=${DURATION:-8}
tmp=$(mktemp -d /tmp/lpmany.XXXXXX)
# A rate board of its own: the host's default one is shared with every
# test ctest runs beside it, on fabrics whose NICs have the same GUIDs
# (tests/failover/scenario.sh).
export LINKPASS_RATE_BOARD="$tmp/rates"
export SIMVERBS_FABRIC="many$$"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$sv" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# Short RC timers and a long hold-down (no failback inside the run, unless
# FAILBACK_AFTER plugs the cable back in); a 10 s watchdog: the pauses
# measured here must not trigger stall moves.
holddown=60000
[ -n "${FAILBACK_AFTER:-}" ] && holddown=500
export NCCL_IB_TIMEOUT=12 LINKPASS_WATCHDOG_MS=10000 LINKPASS_FAILBACK_HOLDDOWN_MS=$holddown NCCL_DEBUG=WARN
"$sink" "$tmp/log.sock" "$tmp/syslog" --stamp & # each line starts with its arrival time
pids+=($!)
for _ in $(seq 200); do [ -S "$tmp/log.sock" ] && break; sleep 0.01; done
export LINKPASS_SYSLOG_SOCKET="$tmp/log.sock"

# run K PULL: one run; prints "longest_gap_s moved p50_ms p99_ms wrong rc
# failbacks fb_p50_ms fb_p99_ms standby_s pull_p50_ms pull_p99_ms plug_p50_ms plug_p99_ms slowest_ms"
run() {
  local k=$1 pull=$2 rc=0 t_pull=- t_plug=-
  : >"$tmp/syslog"
  rm -f "$tmp/gaps"
  rm -f "$tmp"/m-*.prom
  "$sv" up "$top/tests/simverbs/configs/two-hosts-4nic.conf" >/dev/null
  local t0=$EPOCHREALTIME
  LINKPASS_METRICS_FILE="$tmp/m-%p.prom" "$perf" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$plugin" --op sendrecv --channels "$k" \
    --same-dev --step-bytes 4K -b $((k * 1024)) -e $((k * 1024)) --duration "$duration" --timeout $((duration + 90)) \
    --gap-log "$tmp/gaps" >"$tmp/out" 2>&1 &
  local p=$!
  pids+=("$p")
  local deadline=$((SECONDS + 120))
  until grep -q '^ *1\.0 ' "$tmp/out" 2>/dev/null; do
    kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)) || break
    sleep 0.05
  done
  # With standby paths, the pull waits until every connection end has one
  # (the metrics files say so), and that time is reported; but not past
  # 3 s before the run's end ("-": the pull found some ends without one).
  local ready=- last=$((SECONDS + duration - 3))
  if ((pull)) && [ "${LINKPASS_STANDBY:-1}" != 0 ]; then
    until standby_for_all; do
      kill -0 "$p" 2>/dev/null && ((SECONDS < last)) || break
      sleep 0.1
    done
    standby_for_all && ready=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  fi
  if ((pull)); then
    sleep "${PULL_AFTER:-0}"
    if [ -n "${PFREC:-}" ]; then
      perf record -e page-faults -c 1 -d --call-graph dwarf,4096 -k CLOCK_REALTIME -p "$(pgrep -P "$p" | paste -sd,)" -o "$PFREC" \
        -- sleep 1.5 >/dev/null 2>&1 &
      sleep 0.5
    fi
    if [ -n "${CPUREC:-}" ]; then
      perf record -F 1999 --call-graph dwarf,8192 -k CLOCK_REALTIME -p "$(pgrep -P "$p" | paste -sd,)" -o "$CPUREC" \
        -- sleep 1 >/dev/null 2>&1 &
      sleep 0.5
    fi
    # The tool says when the port changed state: its own start takes
    # milliseconds on these busy cores.
    t_pull=$("$sv" link node0:mlx5_0 down | sed -n 's/.* at \([0-9.]*\).*/\1/p')
    [ -z "${KEEP:-}" ] || echo "$t_pull" >"$KEEP/pullwall.$k"
    [ -z "${PFREC:-}${CPUREC:-}" ] || echo "# K = $k: pulled at $t_pull (wall clock; perf's clock in ${PFREC:-}${CPUREC:-})" >&2
    if [ -n "${FAILBACK_AFTER:-}" ]; then
      sleep "$FAILBACK_AFTER"
      t_plug=$("$sv" link node0:mlx5_0 up | sed -n 's/.* at \([0-9.]*\).*/\1/p')
    fi
  fi
  wait "$p" || rc=$?
  "$sv" down >/dev/null 2>&1 || true
  # The sink may still be writing the last datagrams: with a pull, wait
  # until it holds a line for every end that moved (and came back), 5 s at
  # most; the counts below then show what is missing.
  local want_back=0 settle=$((SECONDS + 5))
  [ -n "${FAILBACK_AFTER:-}" ] && want_back=$((4 * k))
  while ((pull)) && ((SECONDS < settle)); do
    (($(grep -c 'event=failover' "$tmp/syslog" || true) >= 4 * k)) &&
      (($(grep -c 'event=failback' "$tmp/syslog" || true) >= want_back)) && break
    sleep 0.05
  done
  if [ -n "${KEEP:-}" ]; then
    cp "$tmp/syslog" "$KEEP/syslog.$k.$pull" && cp "$tmp/out" "$KEEP/out.$k.$pull"
    cp "$tmp/gaps" "$KEEP/gaps.$k.$pull" 2>/dev/null || true
    # The pull's time on the gap log's clock (CLOCK_MONOTONIC), for a look at the pause it made.
    [ "$t_pull" = - ] || python3 -c "import time; print('%.6f' % ($t_pull - (time.time() - time.monotonic())))" \
      >"$KEEP/pull.$k.$pull"
  fi
  local gap moved pct wrong back
  gap=$(awk '{ g = $3 - $2; if (g > w) w = g } END { printf "%.3f", w }' "$tmp/gaps" 2>/dev/null || echo "?")
  moved=$(grep -c 'event=failover' "$tmp/syslog" || true)
  back=$(grep -c 'event=failback' "$tmp/syslog" || true)
  wrong=$(sed -n 's/^# Wrong elements *: *\([0-9]*\).*/\1/p' "$tmp/out")
  slowest=$(sed -n 's/^# Slowest iteration *: *\([0-9.]*\) ms.*/\1/p' "$tmp/out")
  echo "$gap $moved $(percentiles failover) ${wrong:-?} $rc $back $(percentiles failback) $ready" \
    "$(since failover "$t_pull") $(since failback "$t_plug") ${slowest:--}"
}

# Every connection end (2 K in each of the 2 processes) has a ready standby path.
standby_for_all() { (($(prom_sum linkpass_standby_paths "$tmp"/m-*.prom) >= 4 * k)); }

# p50 and p99 (ms) of the duration_us of one kind of event line: "- -" if none.
percentiles() {
  grep -o "event=$1 .*duration_us=[0-9]*" "$tmp/syslog" | sed 's/.*duration_us=//' | sort -n |
    awk '{ v[NR] = $1 } END { if (!NR) { print "- -"; exit } i = int(NR * 0.99 + 0.5); if (i < 1) i = 1;
      printf "%.1f %.1f", v[int((NR + 1) / 2)] / 1e3, v[i] / 1e3 }'
}

# p50 and p99 (ms) from time T0 (s, wall clock; "-": none) to the time=
# of each event line of one kind (the wall clock when that end's traffic
# flowed again): "- -" if none.  One date(1) call for all the lines.
since() {
  [ "$2" = - ] && { echo "- -"; return; }
  sed -n "s/.*event=$1 .* time=\([^ ]*\).*/\1/p" "$tmp/syslog" | date -u -f - +%s.%N |
    awk -v t0="$2" '{ print ($1 - t0) * 1e3 }' | sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "- -"; exit } i = int(NR * 0.99 + 0.5); if (i < 1) i = 1;
      printf "%.1f %.1f", v[int((NR + 1) / 2)], v[i] }'
}

echo "# many connections on one NIC: sendrecv, 2 processes, K channels a direction on mlx5_0, one pull of node0:mlx5_0"
echo "# K channels a direction: 2 K connection ends on node0's mlx5_0 (K sending, K receiving) and 2 K on node1's"
echo "# longest pause between two completions of a rank (s); moved = failover lines (4 K expected: both ends, both directions)"
echo "# standby s: from the start until every end has a standby path (the pull waits for it; - without LINKPASS_STANDBY)"
echo "# slow ms: the slowest iteration of the run (every channel's message of one repetition; with the pull, it holds the"
echo "#   time from the pull until traffic flows on every connection again, plus one iteration)"
echo "# p50/p99 ms: each end's move (fault seen -> traffic flowing); pull p50/p99: the pull (or the plug-in) -> each end's"
echo "#   traffic flowing (the time= of its event line)"
printf '%6s | %10s %8s | %9s | %10s %8s %9s %9s %9s %9s %9s %7s | %9s %9s %9s %9s %9s\n' K "no fault" "slow ms" \
  "standby s" "one pull" "slow ms" moved "p50 ms" "p99 ms" "pull p50" "pull p99" wrong "back" "p50 ms" "p99 ms" \
  "plug p50" "plug p99"
status=0
for k in "${ks[@]}"; do
  g0=- w0=0 rc0=0
  s0=-
  [ "${NOFAULT:-1}" = 0 ] || read -r g0 _ _ _ w0 rc0 _ _ _ _ _ _ _ _ s0 <<<"$(run "$k" 0)"
  read -r g1 m1 p50 p99 w1 rc1 b1 bp50 bp99 sb1 fp50 fp99 fbp50 fbp99 s1 <<<"$(run "$k" 1)"
  printf '%6s | %10s %8s | %9s | %10s %8s %4s/%-4s %9s %9s %9s %9s %7s | %4s/%-4s %9s %9s %9s %9s\n' "$k" "$g0" "$s0" \
    "$sb1" "$g1" "$s1" "$m1" $((4 * k)) "$p50" "$p99" "$fp50" "$fp99" "$w1" "$b1" $((4 * k)) "$bp50" "$bp99" "$fbp50" \
    "$fbp99"
  if ((rc0 || rc1)) || [ "$w0" != 0 ] || [ "$w1" != 0 ]; then
    echo "# K=$k: a run failed (exit $rc0 / $rc1, wrong $w0 / $w1); its output:" >&2
    tail -5 "$tmp/out" >&2
    status=1
  fi
  if ((m1 != 4 * k)); then
    echo "# K=$k: $m1 connection ends moved, not $((4 * k))" >&2
    status=1
  fi
  if [ -n "${FAILBACK_AFTER:-}" ] && ((b1 != 4 * k)); then
    echo "# K=$k: $b1 connection ends moved back, not $((4 * k))" >&2
    status=1
  fi
  if [ -n "${FAILBACK_BOUND_MS:-}" ] && awk -v p="$fbp99" -v b="$FAILBACK_BOUND_MS" 'BEGIN { exit !(p == "-" || p > b) }'; then
    echo "# K=$k: the failback p99 from the plug-in, ${fbp99} ms, is above FAILBACK_BOUND_MS=$FAILBACK_BOUND_MS" >&2
    status=1
  fi
  if [ -n "${BOUND_MS:-}" ] && awk -v g="$g1" -v b="$BOUND_MS" 'BEGIN { exit !(g * 1000 > b) }'; then
    cause="the moves serialize"
    [ "$sb1" != - ] || [ "${LINKPASS_STANDBY:-1}" = 0 ] ||
      cause="the pull came before every end had its standby path (a longer DURATION gives them time)"
    echo "# K=$k: the longest pause with the pull, ${g1} s, is above BOUND_MS=$BOUND_MS: $cause" >&2
    status=1
  fi
done
exit $status
