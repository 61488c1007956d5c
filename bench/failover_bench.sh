#!/usr/bin/env bash
# Failover benchmarks on the simulated fabric (docs/PERFORMANCE.md has the
# results and the method).  Each part prints a table.
#
# usage: bench/failover_bench.sh BUILD_DIR [time|overhead|degraded|gray|slow|all]
#   time      failover time, from the injected fault to the first completion
#             after it, p50/p99 over $INJECTIONS (default 50) port-down faults;
#             MEM=dmabuf (or cuda): the buffers in GPU memory (linkpass-perf --mem);
#             CHANNELS=N: N connections a direction, all on mlx5_0 (default 1)
#   overhead  busbw with LINKPASS_FAILOVER=1 against =0, 1 MiB .. 256 MiB,
#             $ROUNDS (default 3) interleaved rounds (A B A B ...);
#             STEADY=1: 64 KiB .. 1 MiB, 30,000 iterations a size (seconds
#             of traffic a size, where 20 iterations last milliseconds)
#   degraded  busbw with one of four rate-limited NICs down against all four
#             up, $ROUNDS interleaved rounds
#   gray      busbw with 1 % packet loss on one of four rate-limited NICs,
#             drained (LINKPASS_GRAY=1, the default) and kept (=0), against
#             that NIC down and all four healthy, $ROUNDS interleaved rounds
#   slow      the same with one of four 10 Gb/s NICs moving data at 25 % of
#             its rate and losing nothing (simverbs fault ... rate 25)
set -euo pipefail
build=${1:?usage: failover_bench.sh BUILD_DIR [time|overhead|degraded|gray|slow|all]}
what=${2:-all}
top=$(cd "$(dirname "$0")/.." && pwd)
sv="$build/simverbs/simverbs"
perf="$build/bench/linkpass-perf"
inject="$build/bench/flap_inject"
plugin="${PLUGIN:-$build/lib/libnccl-net-linkpass.so}" # PLUGIN: another build's, on this fabric
confs="$top/tests/simverbs/configs"
injections=${INJECTIONS:-50}
rounds=${ROUNDS:-3}
tmp=$(mktemp -d /tmp/lpfobench.XXXXXX)
export SIMVERBS_FABRIC="fob$$"
perf_pid=""
cleanup() {
  [ -n "$perf_pid" ] && kill "$perf_pid" 2>/dev/null && wait "$perf_pid" 2>/dev/null
  "$sv" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

export NCCL_DEBUG=WARN

# fabric CONFIG [RATE]: bring up CONFIG, with every NIC at RATE Gb/s if given.
fabric() {
  local conf=$1 rate=${2:-}
  "$sv" down >/dev/null 2>&1 || true
  if [ -n "$rate" ]; then
    sed "s/^rate .*/rate $rate/" "$conf" >"$tmp/fabric.conf"
    conf="$tmp/fabric.conf"
  fi
  "$sv" up "$conf" >/dev/null
}

# busbw ARGS...: the driver's busbw column of every row, one per line.
busbw() {
  "$perf" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$plugin" "$@" |
    awk '$1 ~ /^[0-9]+$/ && NF >= 9 { print $1, $8 }'
}

# Median of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# p50 and p99 (nearest rank) of the numbers on stdin.
percentiles() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan nan 0"; exit }
    i50 = int(NR * 0.50 + 0.999999); i99 = int(NR * 0.99 + 0.999999)
    printf "%.2f %.2f %d %.2f\n", v[i50], v[i99], NR, v[NR] }'
}

part_time() {
  # The scenarios' short timers (tests/failover/scenario.sh: a 300 ms
  # watchdog, a 500 ms hold-down, a 134 ms retry budget), and no damping:
  # every fault must find the connections back on mlx5_0.  The other parts
  # keep the defaults.
  local NCCL_IB_TIMEOUT=12 LINKPASS_WATCHDOG_MS=300 LINKPASS_FAILBACK_HOLDDOWN_MS=500 \
    LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=500
  export NCCL_IB_TIMEOUT LINKPASS_WATCHDOG_MS LINKPASS_FAILBACK_HOLDDOWN_MS LINKPASS_FAILBACK_HOLDDOWN_MAX_MS
  fabric "$confs/two-hosts-4nic.conf"
  # 64 KiB sendrecv between a rank on node0 and one on node1 (device mlx5_0
  # on both); every completion pause of 1 ms or more goes to the gap log.
  local period=1.6 secs
  secs=$(awk -v n="$injections" -v p="$period" 'BEGIN { printf "%d", n * p + 6 }')
  "$perf" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$plugin" --op sendrecv \
    -b 64K -e 64K -R 1 --duration "$secs" --timeout $((secs + 60)) --gap-log "$tmp/gaps" --mem "${MEM:-host}" \
    --channels "${CHANNELS:-1}" --same-dev \
    >"$tmp/out" 2>&1 &
  perf_pid=$!
  sleep 3 # connected and running
  # Alternately node0's and node1's cable: down 400 ms, then up 1200 ms
  # (the 500 ms hold-down and the move back fit in it).
  "$inject" "$SIMVERBS_FABRIC" "$injections" 400 1200 node0:mlx5_0 node1:mlx5_0 >"$tmp/inject"
  local rc=0
  wait "$perf_pid" || rc=$?
  perf_pid=""
  if ((rc != 0)); then
    echo "failover_bench: the driver failed (exit $rc):" >&2
    tail -20 "$tmp/out" >&2
    return 1
  fi
  grep -q "Wrong elements *: 0 OK" "$tmp/out" || { echo "failover_bench: wrong data" >&2; return 1; }
  # For each fault at T0 and each rank: the end of the first completion
  # pause that ends after T0 and began before T0 + 1 ms, i.e. the first
  # completion once the fault stopped traffic.  No such pause: traffic went
  # on within 1 ms, counted as 1 ms.  Rank 0 runs on node0, rank 1 on node1:
  # the rank on the faulted host sees a local port down, the other a remote.
  awk -v W=0.001 '
    FNR == NR { if ($1 == "down") { n++; t0[n] = $4; host[n] = substr($3, 1, index($3, ":") - 1) } next }
    { g++; r[g] = $1; a[g] = $2; b[g] = $3 }
    END {
      for (i = 1; i <= n; i++) for (k = 0; k <= 1; k++) {
        best = -1
        for (j = 1; j <= g; j++) if (r[j] == k && b[j] > t0[i] && a[j] < t0[i] + W && (best < 0 || b[j] < best)) best = b[j]
        ms = best < 0 ? W * 1000 : (best - t0[i]) * 1000
        local = (host[i] == "node" k)
        print (local ? "local" : "remote"), ms, best < 0
      }
    }' "$tmp/inject" "$tmp/gaps" >"$tmp/times"
  local events
  events=$(grep -c "event=failover" "$tmp/out" || true)
  echo "# failover time: fault injected (flap_inject) -> first completion after it, ms"
  echo "# $injections port-down faults, alternately node0:mlx5_0 and node1:mlx5_0; sendrecv 64 KiB, -R 1, --mem ${MEM:-host}, ${CHANNELS:-1} channel(s) on mlx5_0"
  printf '%-18s %8s %8s %8s %8s %10s\n' "fault" "p50" "p99" "max" "samples" "target p99"
  for kind in local remote; do
    read -r p50 p99 n max < <(awk -v k="$kind" '$1 == k { print $2 }' "$tmp/times" | percentiles)
    printf '%-18s %8s %8s %8s %8s %10s\n' "$kind port down" "$p50" "$p99" "$max" "$n" \
      "$([ "$kind" = local ] && echo "< 20" || echo "< 200")"
  done
  echo "# faults after which traffic never paused 1 ms (counted as 1 ms): $(awk '$3 == 1' "$tmp/times" | wc -l) of $((2 * injections))"
  echo "# event=failover lines: $events (4 expected per fault: both ends of both connections)"
  echo "# the plugin's own duration_us (detection -> traffic flowing), per connection end:"
  grep -o "event=failover.*reason=[a-z_]*.*duration_us=[0-9]*" "$tmp/out" |
    awk '{ for (i = 1; i <= NF; i++) { if ($i ~ /^reason=/) r = substr($i, 8); if ($i ~ /^duration_us=/) d = substr($i, 13) }
           print r, d / 1000 }' >"$tmp/durations"
  for reason in port_down peer_notice; do
    read -r p50 p99 n max < <(awk -v k="$reason" '$1 == k { print $2 }' "$tmp/durations" | percentiles)
    printf '#   reason=%-12s p50 %s ms, p99 %s ms, max %s ms (%s lines)\n' "$reason" "$p50" "$p99" "$max" "$n"
  done
}

part_overhead() {
  fabric "$confs/two-hosts-ib.conf" 400
  local sizes=() fo r size
  local order span="-b 1M -e 256M -f 2 -n 20 -w 5"
  [ "${STEADY:-0}" = 1 ] && span="-b 64K -e 1M -f 4 -n 30000 -w 100"
  for r in $(seq "$rounds"); do
    # ABBA: the order flips every round, so a first-run-of-a-pair effect
    # (caches, page faults, the other side still exiting) cancels out.
    order="1 0"
    ((r % 2 == 0)) && order="0 1"
    for fo in $order; do
      # shellcheck disable=SC2086 # span is a list of options
      LINKPASS_FAILOVER=$fo busbw --op sendrecv -R 1 $span >"$tmp/ov.$fo.$r" 2>>"$tmp/ov.err"
    done
  done
  mapfile -t sizes < <(awk '{ print $1 }' "$tmp/ov.1.1")
  echo "# failovers while nothing failed: $(grep -c 'event=failover' "$tmp/ov.err" || true)"
  echo "# cost when nothing fails: sendrecv busbw, LINKPASS_FAILOVER=1 against =0, -R 1, rate 400 Gb/s"
  echo "# median of $rounds interleaved rounds (1 0, 0 1, 1 0, ...)"
  echo "# rounds below: those in which FAILOVER=1 was the slower of the pair"
  printf '%12s %14s %14s %8s %14s\n' "bytes" "FAILOVER=1" "FAILOVER=0" "ratio" "rounds below"
  printf '%12s %14s %14s %8s %14s\n' "" "GB/s" "GB/s" "" ""
  for size in "${sizes[@]}"; do
    local on off below=0
    on=$(awk -v s="$size" '$1 == s { print $2 }' "$tmp"/ov.1.* | median)
    off=$(awk -v s="$size" '$1 == s { print $2 }' "$tmp"/ov.0.* | median)
    for r in $(seq "$rounds"); do
      awk -v s="$size" '$1 == s { print $2 }' "$tmp/ov.1.$r" "$tmp/ov.0.$r" | paste -sd' ' |
        awk '{ exit !($1 < $2) }' && below=$((below + 1))
    done
    printf '%12s %14s %14s %8s %14s\n' "$size" "$on" "$off" "$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }')" \
      "$below of $rounds"
  done
}

part_degraded() {
  # Four NICs per host at 25 Gb/s; four channels, so that every NIC carries
  # one connection each way.
  fabric "$confs/two-hosts-4nic.conf" 25
  local r state
  for r in $(seq "$rounds"); do
    for state in healthy degraded; do
      [ "$state" = degraded ] && "$sv" link node0:mlx5_3 down >/dev/null
      busbw --op sendrecv -R 1 --channels 4 -b 64M -e 256M -f 4 -n 10 -w 3 >"$tmp/dg.$state.$r"
      [ "$state" = degraded ] && "$sv" link node0:mlx5_3 up >/dev/null
    done
  done
  echo "# degraded throughput: sendrecv busbw, 4 channels over 4 NICs per host at 25 Gb/s, -R 1"
  echo "# node0:mlx5_3 down for the whole degraded run; median of $rounds interleaved rounds"
  printf '%12s %14s %14s %8s\n' "bytes" "healthy" "1 of 4 down" "ratio"
  printf '%12s %14s %14s %8s\n' "" "GB/s" "GB/s" ""
  local size
  for size in $(awk '{ print $1 }' "$tmp/dg.healthy.1"); do
    local h d
    h=$(awk -v s="$size" '$1 == s { print $2 }' "$tmp"/dg.healthy.* | median)
    d=$(awk -v s="$size" '$1 == s { print $2 }' "$tmp"/dg.degraded.* | median)
    printf '%12s %14s %14s %8s\n' "$size" "$h" "$d" "$(awk -v a="$d" -v b="$h" 'BEGIN { printf "%.3f", a / b }')"
  done
}

# drain_states TAG RATE WARMUP FAULT...: sendrecv busbw of 64 MiB, 4
# channels over 4 NICs per host at RATE Gb/s, with node0:mlx5_0 healthy,
# down, and under FAULT (`simverbs fault node0:mlx5_0 FAULT...`) drained
# (LINKPASS_GRAY=1) and kept (=0), $rounds interleaved rounds; then the
# medians and their ratios to the NIC simply down.  The drain happens
# during the WARMUP iterations.  NCCL_IB_TIMEOUT=14 (67 ms): at NCCL's
# default 4.3 s a lost last packet would stall the run long enough for the
# watchdog to move it (a stall), hiding the difference.
drain_states() {
  local tag=$1 rate=$2 warm=$3 r state
  shift 3
  fabric "$confs/two-hosts-4nic.conf" "$rate"
  for r in $(seq "$rounds"); do
    for state in healthy down drained kept; do
      case $state in
      down) "$sv" link node0:mlx5_0 down >/dev/null ;;
      drained | kept) "$sv" fault node0:mlx5_0 "$@" >/dev/null ;;
      esac
      LINKPASS_GRAY=$([ "$state" = kept ] && echo 0 || echo 1) NCCL_IB_TIMEOUT=14 \
        busbw --op sendrecv -R 1 --channels 4 -b 64M -e 64M -n 20 -w "$warm" >"$tmp/$tag.$state.$r"
      "$sv" link node0:mlx5_0 up >/dev/null
      "$sv" fault node0:mlx5_0 clear >/dev/null
    done
  done
  echo "# median of $rounds interleaved rounds; ratios against the NIC simply down"
  printf '%10s %10s %10s %10s %14s %12s\n' "healthy" "down" "drained" "kept" "drained/down" "kept/down"
  local h d g k
  h=$(awk '{ print $2 }' "$tmp/$tag".healthy.* | median)
  d=$(awk '{ print $2 }' "$tmp/$tag".down.* | median)
  g=$(awk '{ print $2 }' "$tmp/$tag".drained.* | median)
  k=$(awk '{ print $2 }' "$tmp/$tag".kept.* | median)
  printf '%10s %10s %10s %10s %14s %12s\n' "$h" "$d" "$g" "$k" "$(awk -v a="$g" -v b="$d" 'BEGIN { printf "%.3f", a / b }')" \
    "$(awk -v a="$k" -v b="$d" 'BEGIN { printf "%.3f", a / b }')"
}

part_gray() {
  echo "# gray failure: sendrecv busbw of 64 MiB, 4 channels over 4 NICs per host at 25 Gb/s, -R 1, NCCL_IB_TIMEOUT=14"
  echo "# node0:mlx5_0 loses 1 % of its packets (drained: LINKPASS_GRAY=1; kept: =0), or is down"
  drain_states gr 25 20 loss 1
}

part_slow() {
  # 10 Gb/s ports: slower than this machine copies, so the wire sets the
  # pace (at higher rates the CPU does, and a slow port costs nothing here).
  echo "# slow port: sendrecv busbw of 64 MiB, 4 channels over 4 NICs per host at 10 Gb/s, -R 1"
  echo "# node0:mlx5_0 moves data at 25 % of its rate and loses nothing (drained: LINKPASS_GRAY=1; kept: =0), or is down"
  drain_states sl 10 60 rate 25
}

case $what in
time) part_time ;;
gray) part_gray ;;
slow) part_slow ;;
overhead) part_overhead ;;
degraded) part_degraded ;;
all)
  part_time
  echo
  part_overhead
  echo
  part_degraded
  ;;
*)
  echo "usage: failover_bench.sh BUILD_DIR [time|overhead|degraded|gray|slow|all]" >&2
  exit 2
  ;;
esac
