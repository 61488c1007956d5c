#!/usr/bin/env bash
# Every plot of docs/PERFORMANCE.md, measured and drawn from one command:
#
#   bench/plots.sh BUILD_DIR [flap|gray|slow|failover|sizes|all] (default: all)
#
#   flap      busbw second by second through a cable pull, the reinsertion
#             and the failback: docs/img/busbw-flap.png
#   gray      busbw second by second through a gray failure: 1 % packet loss
#             on one of four NICs (4 channels), its drain, the loss cleared
#             and the failback: docs/img/busbw-gray.png
#   slow      the same through one of four 10 Gb/s NICs slowed to 25 % of
#             its rate without loss (sendrecv): docs/img/busbw-slow.png
#   failover  failover-time distribution (CDF of the duration_us field of
#             the syslog failover lines) over $INJECTIONS (default 50) cable
#             pulls of alternating hosts in one long run, p50/p99 printed:
#             docs/img/failover-time.png
#   sizes     busbw against message size: the driver's sendrecv (-b 8 -e 64M)
#             next to perftest's ib_write_bw -a on the same fabric:
#             docs/img/busbw-sizes.png
#
# The fabric is tests/simverbs/configs/two-hosts-4nic.conf (2 hosts x 4 NICs,
# 200 Gb/s), 2 ranks, one per host; cables are pulled with `simverbs link`
# (no root needed).  Needs gnuplot (Debian: gnuplot-nox, in scripts/setup.sh).
# The measured numbers land next to the plots in docs/img/plots.txt, and the
# raw data in docs/img/*.dat (redraw only: PLOTS_REDRAW=1 bench/plots.sh B).
set -euo pipefail
build=${1:?usage: bench/plots.sh BUILD_DIR [flap|gray|slow|failover|sizes|all]}
what=${2:-all}
build=$(cd "$build" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
img="$top/docs/img"
sv="$build/simverbs/simverbs" perf="$build/bench/linkpass-perf" plugin="$build/lib/libnccl-net-linkpass.so"
sink="$build/tests/failover/syslog_sink"
conf="$top/tests/simverbs/configs/two-hosts-4nic.conf"
injections=${INJECTIONS:-50}
redraw=${PLOTS_REDRAW:-0}
case $what in flap | gray | slow | failover | sizes | all) ;; *) echo "unknown part '$what': flap, gray, slow, failover, sizes or all" >&2; exit 2 ;; esac
command -v gnuplot >/dev/null || { echo "plots: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
if [ "$redraw" != 1 ]; then
  for f in "$sv" "$perf" "$plugin" "$sink"; do
    [ -e "$f" ] || { echo "plots: $f is missing: build first (bash scripts/build.sh)" >&2; exit 1; }
  done
fi
mkdir -p "$img"
export LC_ALL=C

tmp=$(mktemp -d /tmp/lpplots.XXXXXX)
export SIMVERBS_FABRIC="plots$$"
bg=()
cleanup() {
  local p
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$sv" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
# note KEY VALUE: the numbers for docs/PERFORMANCE.md, kept per part
note() {
  touch "$img/plots.txt"
  grep -v "^$1 " "$img/plots.txt" >"$tmp/notes" || true
  echo "$1 $2" >>"$tmp/notes"
  sort "$tmp/notes" >"$img/plots.txt"
  echo "  $1 = $2"
}
png() { echo "set terminal pngcairo size 960,540 font 'DejaVu Sans,11' noenhanced; set output '$1'"; }

start_sink() {
  "$sink" "$tmp/log.sock" "$tmp/syslog" &
  bg+=($!)
  for _ in $(seq 200); do [ -S "$tmp/log.sock" ] && break; sleep 0.01; done
  # every line stamped with its arrival time, in ms
  : >"$tmp/syslog"
  (
    tail -n +1 -F "$tmp/syslog" 2>/dev/null &
    echo $! >"$tmp/tail.pid"
    wait
  ) | while IFS= read -r l; do echo "$(now_ms) $l"; done >"$tmp/stamped" &
  bg+=($!)
  for _ in $(seq 100); do [ -s "$tmp/tail.pid" ] && break; sleep 0.01; done
  bg+=("$(cat "$tmp/tail.pid")")
}
# run_perf SECONDS SIZE [ARGS...]: the checked all_reduce loop in the background ($perf_pid)
run_perf() {
  local secs=$1 size=$2
  shift 2
  LINKPASS_SYSLOG_SOCKET="$tmp/log.sock" "$perf" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 \
    --plugin "$plugin" --op all_reduce -e "$size" --duration "$secs" --timeout $((secs + 60)) "$@" >"$tmp/out" 2>"$tmp/err" &
  perf_pid=$!
  bg+=("$perf_pid")
  for _ in $(seq 1200); do grep -q '^# --duration' "$tmp/out" && break; sleep 0.05; done
  t0=$(now_ms)
}
at() { # wait until T seconds into the table
  local w=$((t0 + ${1/./} * 100 - $(now_ms)))
  ((w <= 0)) || sleep "$((w / 1000)).$(printf '%03d' $((w % 1000)))"
}
finish_perf() {
  wait "$perf_pid" || { echo "plots: the driver failed:" >&2; tail -20 "$tmp/err" >&2; exit 1; }
  grep -q "Wrong elements *: 0 OK" "$tmp/out" || { echo "plots: wrong data" >&2; exit 1; }
  sleep 0.3
}

# The fabric down, the sink and its stamper stopped, their files gone.
end_run() {
  local p
  "$sv" down >/dev/null
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bg=()
  rm -f "$tmp/inj" "$tmp/syslog" "$tmp/stamped"
}

# draw_timeline DAT EVENTS PNG TITLE: busbw per second with the events as lines
draw_timeline() {
  {
    png "$3"
    echo "set title '$4' noenhanced"
    echo "set xlabel 'time (s)'; set ylabel 'busbw (GB/s), per second'; set grid; set key bottom right"
    echo "set yrange [0:*]; set xrange [0:*]"
    awk '{ c = ($0 ~ /pulled|failover|loss 1|begins/) ? "#c0392b" : "#27ae60"; dt = ($0 ~ /cable|loss|begins|fault/) ? 1 : 2
           t = $1; sub(/^[^ ]* /, "")
           printf "set arrow from %s, graph 0 to %s, graph 1 nohead lc rgb \"%s\" dt %d lw 2\n", t, t, c, dt
           printf "set label \"%s\" at %s, graph %.2f offset 0.5,0 tc rgb \"%s\"\n", $0, t, 0.95 - 0.06 * (NR - 1), c }' "$2"
    echo "plot '$1' using 1:2 with linespoints lw 2 pt 7 lc rgb '#2c3e50' title 'busbw (GB/s)'"
  } >"$tmp/timeline.gp"
  gnuplot "$tmp/timeline.gp"
}

# ---------------------------------------------------------------- gray, slow
# degrade_plot NAME CONF BEGINS TITLE FAULT -- DRIVER_ARGS...: busbw per
# second for 24 s while node0:mlx5_0 suffers `simverbs fault ... FAULT` from
# 6 s to 12 s (then `clear`), with the drain and the first failback marked:
# docs/img/busbw-NAME.png.
degrade_plot() {
  local name=$1 fabric=$2 begins=$3 title=$4 fault=()
  shift 4
  while [ "$1" != -- ]; do fault+=("$1"); shift; done
  shift
  local dat="$img/busbw-$name.dat" ev="$img/busbw-$name.events"
  if [ "$redraw" != 1 ]; then
    echo "== $name: node0:mlx5_0 ${fault[*]} from 6 s to 12 s; driver: $*"
    "$sv" up "$fabric" >/dev/null
    start_sink
    NCCL_IB_TIMEOUT=14 run_perf 24 16M --channels 4 "$@"
    at 6.0 && "$sv" fault node0:mlx5_0 "${fault[@]}" >/dev/null && echo "$(now_ms) begins" >>"$tmp/inj"
    at 12.0 && "$sv" fault node0:mlx5_0 clear >/dev/null && echo "$(now_ms) clear" >>"$tmp/inj"
    finish_perf
    awk '$1 ~ /^[0-9.]+$/ && NF == 5 { print $1, $4 }' "$tmp/out" >"$dat"
    {
      awk -v t0="$t0" -v b="$begins" '{ printf "%.3f %s\n", ($1 - t0) / 1000, ($2 == "begins" ? b : "fault cleared") }' "$tmp/inj"
      awk -v t0="$t0" '/event=failover.*reason=degraded/ && !fo++ { printf "%.3f drained (degraded)\n", ($1 - t0) / 1000 }
                       /event=failback/ && !fb++ { printf "%.3f failback\n", ($1 - t0) / 1000 }' "$tmp/stamped"
    } | sort -n >"$ev"
    note "$name.avg_busbw_GBps" "$(sed -n 's/^# Avg bus bandwidth *: //p' "$tmp/out")"
    note "$name.drained" "$(grep -c 'reason=degraded' "$tmp/syslog" || true)"
    note "$name.failbacks" "$(grep -c 'event=failback' "$tmp/syslog" || true)"
    note "$name.events" "$(awk '{ t = $1; sub(/^[^ ]* /, ""); gsub(/ /, "-"); printf "%s%s@%ss", (NR > 1 ? "," : ""), $0, t }' "$ev")"
    end_run
  fi
  draw_timeline "$dat" "$ev" "$img/busbw-$name.png" "$title"
  echo "  -> $img/busbw-$name.png"
}

gray() {
  degrade_plot gray "$conf" "loss 1 % begins" \
    'all_reduce busbw through 1 % packet loss on one of 4 NICs, its drain and failback (2 ranks, 16 MiB, 4 channels)' \
    loss 1 --
}

# A port at a quarter of its rate, losing nothing: 10 Gb/s ports and
# sendrecv, which the wire paces (docs/FAILOVER.md, "A slow port that loses
# nothing").
slow() {
  sed 's/^rate .*/rate 10/' "$conf" >"$tmp/slow.conf"
  degrade_plot slow "$tmp/slow.conf" "rate 25 % begins" \
    'sendrecv busbw through one of 4 NICs slowed to 25 % (no loss), its drain and failback (2 ranks, 16 MiB, 4 channels, 10 Gb/s)' \
    rate 25 -- --op sendrecv -R 1 -b 16M
}

# ---------------------------------------------------------------- (a) flap
flap() {
  local dat="$img/busbw-flap.dat" ev="$img/busbw-flap.events"
  if [ "$redraw" != 1 ]; then
    echo "== flap: all_reduce 16M, 2 ranks, node0:mlx5_0 pulled at 6 s, back at 12 s (hold-down 2 s)"
    "$sv" up "$conf" >/dev/null
    start_sink
    run_perf 24 16M
    at 6.0 && "$sv" link node0:mlx5_0 down >/dev/null && echo "$(now_ms) pull" >>"$tmp/inj"
    at 12.0 && "$sv" link node0:mlx5_0 up >/dev/null && echo "$(now_ms) plug" >>"$tmp/inj"
    finish_perf
    awk '$1 ~ /^[0-9.]+$/ && NF == 5 { print $1, $4 }' "$tmp/out" >"$dat"
    # events, in seconds of the table: injections, then the first failover and failback line
    {
      awk -v t0="$t0" '{ printf "%.3f %s\n", ($1 - t0) / 1000, ($2 == "pull" ? "cable pulled" : "cable back in") }' "$tmp/inj"
      awk -v t0="$t0" '/event=failover/ && !fo++ { printf "%.3f failover\n", ($1 - t0) / 1000 }
                       /event=failback/ && !fb++ { printf "%.3f failback\n", ($1 - t0) / 1000 }' "$tmp/stamped"
    } | sort -n >"$ev"
    note flap.slowest_iteration "$(sed -n 's/^# Slowest iteration *: //p' "$tmp/out")"
    note flap.avg_busbw_GBps "$(sed -n 's/^# Avg bus bandwidth *: //p' "$tmp/out")"
    note flap.failovers "$(grep -c 'event=failover' "$tmp/syslog" || true)"
    note flap.failbacks "$(grep -c 'event=failback' "$tmp/syslog" || true)"
    note flap.events "$(awk '{ printf "%s%s@%ss", (NR > 1 ? "," : ""), $2 == "cable" ? $2 "-" $3 : $2, $1 }' "$ev")"
    end_run
  fi
  draw_timeline "$dat" "$ev" "$img/busbw-flap.png" \
    'all_reduce busbw through a cable pull and its failback (2 ranks, 16 MiB, simulated 2 x 4 NIC fabric)'
  echo "   -> $img/busbw-flap.png"
}

# ------------------------------------------------------------ (b) failover
failover() {
  local dat="$img/failover-time.dat"
  if [ "$redraw" != 1 ]; then
    local secs=$((injections * 3 / 2 + 8)) k
    echo "== failover: $injections cable pulls (0.4 s each), alternating node0:mlx5_0 and node1:mlx5_0, one $secs s run"
    # a short hold-down so that every pull finds the traffic back on its NIC
    export LINKPASS_FAILBACK_HOLDDOWN_MS=300 LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=600
    "$sv" up "$conf" >/dev/null
    start_sink
    run_perf "$secs" 4M
    for ((k = 0; k < injections; k++)); do
      local host="node$((k % 2))" nic=mlx5_0 # each rank's own NIC: the one carrying its traffic
      at "$((2 + k * 3 / 2)).$((k % 2 * 5))"
      "$sv" link "$host:$nic" down >/dev/null
      sleep 0.4
      "$sv" link "$host:$nic" up >/dev/null
    done
    finish_perf
    unset LINKPASS_FAILBACK_HOLDDOWN_MS LINKPASS_FAILBACK_HOLDDOWN_MAX_MS
    # reason duration_us, for every failover line
    sed -n 's/.*event=failover .* reason=\([a-z_]*\) .* duration_us=\([0-9]*\).*/\1 \2/p' "$tmp/syslog" >"$dat"
    end_run
  fi
  local r
  for r in port_down peer_notice all; do
    awk -v r="$r" 'r == "all" || $1 == r { print $2 / 1000 }' "$dat" | sort -n >"$tmp/cdf.$r"
    local n p50 p99 max
    n=$(wc -l <"$tmp/cdf.$r")
    ((n > 0)) || continue
    p50=$(awk -v n="$n" 'NR == int((n - 1) * 0.50) + 1' "$tmp/cdf.$r")
    p99=$(awk -v n="$n" 'NR == int((n - 1) * 0.99 + 0.999) + 1' "$tmp/cdf.$r" | head -1)
    max=$(tail -1 "$tmp/cdf.$r")
    note "failover.$r" "n=$n p50=${p50}ms p99=${p99:-$max}ms max=${max}ms"
    awk -v n="$n" '{ print $1, NR / n }' "$tmp/cdf.$r" >"$tmp/cdf.$r.xy"
  done
  {
    png "$img/failover-time.png"
    echo "set title 'Failover time: the duration_us of each syslog failover line ($injections cable pulls, 2 ranks)' noenhanced"
    echo "set xlabel 'failover time (ms, log scale): fault seen -> traffic flowing on the new NIC'"
    echo "set ylabel 'fraction of failovers'; set logscale x; set grid; set key bottom right; set yrange [0:1.02]"
    echo "plot '$tmp/cdf.port_down.xy' using 1:2 with steps lw 2 lc rgb '#c0392b' title 'reason=port_down (a link down; also the receiver it moves)', \\"
    echo "     '$tmp/cdf.peer_notice.xy' using 1:2 with steps lw 2 lc rgb '#2980b9' title 'reason=peer_notice (the peer lost its link)'"
  } >"$tmp/fo.gp"
  gnuplot "$tmp/fo.gp"
  echo "   -> $img/failover-time.png"
}

# --------------------------------------------------------------- (c) sizes
sizes() {
  local dat="$img/busbw-sizes.dat"
  if [ "$redraw" != 1 ]; then
    echo "== sizes: linkpass-perf sendrecv -b 8 -e 64M -f 2 -R 1 next to ib_write_bw -a, node1 -> node0"
    "$sv" up "$conf" >/dev/null
    "$perf" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$plugin" --op sendrecv \
      -b 8 -e 64M -f 2 -R 1 -n 20 -w 5 >"$tmp/sr" 2>"$tmp/sr.err" || { cat "$tmp/sr.err" >&2; exit 1; }
    local port=$((20000 + RANDOM % 30000))
    "$sv" run --host node0 -- ib_write_bw -d mlx5_0 -p "$port" -F -a --report_gbits >/dev/null 2>&1 &
    bg+=($!)
    for _ in $(seq 200); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.05; done
    "$sv" run --host node1 -- ib_write_bw -d mlx5_0 -p "$port" -F -a --report_gbits 127.0.0.1 >"$tmp/wb" 2>&1
    wait "${bg[-1]}" || true
    # bytes linkpass_busbw ib_write_bw_GBps (Gb/s / 8)
    awk 'NR == FNR { if ($1 ~ /^[0-9]+$/ && NF >= 4) wb[$1] = $4 / 8; next }
         $1 ~ /^[0-9]+$/ && NF >= 8 { printf "%s %s %s\n", $1, $(NF - 1), ($1 in wb ? wb[$1] : "NaN") }' \
      "$tmp/wb" "$tmp/sr" >"$dat"
    "$sv" down >/dev/null
    bg=()
  fi
  local b
  for b in 65536 1048576 8388608 67108864; do
    note "sizes.$b" "$(awk -v b="$b" '$1 == b { printf "linkpass %s GB/s, ib_write_bw %s GB/s", $2, $3 }' "$dat")"
  done
  {
    png "$img/busbw-sizes.png"
    echo "set title 'Bandwidth against message size on the same simulated fabric (node1 -> node0, 200 Gb/s NICs)' noenhanced"
    echo "set xlabel 'message size (bytes, log scale)'; set ylabel 'GB/s'; set logscale x 2; set grid; set key top left"
    echo "set format x '%.0b%B'; set xrange [8:*]; set yrange [0:*]"
    echo "plot '$dat' using 1:3 with linespoints lw 2 pt 7 lc rgb '#7f8c8d' title 'perftest ib_write_bw -a (one QP, one way; sizes up to 8 MiB)', \\"
    echo "     '$dat' using 1:2 with linespoints lw 2 pt 5 lc rgb '#c0392b' title 'linkpass-perf sendrecv busbw (2 ranks, -R 1)'"
  } >"$tmp/sizes.gp"
  gnuplot "$tmp/sizes.gp"
  echo "   -> $img/busbw-sizes.png"
}

[ "$what" = all ] || [ "$what" = flap ] && flap
[ "$what" = all ] || [ "$what" = gray ] && gray
[ "$what" = all ] || [ "$what" = slow ] && slow
[ "$what" = all ] || [ "$what" = failover ] && failover
[ "$what" = all ] || [ "$what" = sizes ] && sizes
echo "numbers: $img/plots.txt"
