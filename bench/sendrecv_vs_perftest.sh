#!/usr/bin/env bash
# The plugin's sendrecv next to perftest on the same simulated fabric, in
# the same run, interleaved round by round (docs/PERFORMANCE.md).
#
# usage: bench/sendrecv_vs_perftest.sh BUILD_DIR
#   env: RATES (Gb/s of every NIC, one table each; default "25 400"),
#        ROUNDS (bandwidth rounds, default 3), SIZES (default "64M 128M 256M"),
#        LAT_ROUNDS (latency pairs, default 9), LAT_ITERS (8-byte sendrecv
#        iterations per run, default 50000)
#
# Two wire speeds, because the simulated fabric moves bytes with the CPU:
# at 25 Gb/s the wire is the limit in both directions at once, as on a real
# full-duplex link whose DMA engines leave the cores alone; at 400 Gb/s the
# CPUs are (every byte a memcpy by the sending process, both directions of
# a sendrecv sharing 2 cores), which no hardware shows.
#
# Bandwidth: linkpass-perf sendrecv, 2 ranks on two hosts, -R 1 (registered
# user buffers: the driver copies nothing, as with GPU buffers under NCCL),
# against ib_write_bw one way and ib_write_bw -b (both ways at once, which is
# the traffic a 2-rank sendrecv makes; its sum is halved to one direction).
# Units: perftest's MB is 2^20 bytes, nccl-tests' GB 10^9; the plugin's
# figure is converted to perftest's unit.
# Latency (at the first rate; the fabric adds 1 us per work request):
# linkpass-perf sendrecv of 8 bytes, nccl-tests' default path (-R 0: NCCL
# moves small messages through its own buffers), right after ib_write_lat
# -s 8 (typical = median, and average), pair by pair: this machine's
# cross-core latency changes over minutes, so each pair is compared on its
# own and the ratios' median is reported.
set -euo pipefail
build=${1:?usage: sendrecv_vs_perftest.sh BUILD_DIR}
read -r -a rates <<<"${RATES:-25 400}"
rounds=${ROUNDS:-3}
lat_iters=${LAT_ITERS:-50000}
lat_rounds=${LAT_ROUNDS:-9}
read -r -a sizes <<<"${SIZES:-64M 128M 256M}"
top=$(cd "$(dirname "$0")/.." && pwd)
sv="$build/simverbs/simverbs"
perf="$build/bench/linkpass-perf"
plugin="$build/lib/libnccl-net-linkpass.so"
tmp=$(mktemp -d /tmp/lpsrbench.XXXXXX)
export SIMVERBS_FABRIC="srb$$"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  "$sv" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

bytes() { numfmt --from=iec "$1"; }

# perftest TOOL ARGS...: server on node0, client on node1; the client's output.
perftest() {
  local tool=$1 port
  shift
  port=$((20000 + RANDOM % 30000))
  "$sv" run --host node0 -- "$tool" -d mlx5_0 -p "$port" -F "$@" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 400); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.05; done
  "$sv" run --host node1 -- "$tool" -d mlx5_0 -p "$port" -F "$@" 127.0.0.1
  wait "$server" || true
  server=""
}

# BW average (MB/s) of ib_write_bw's result line for SIZE.
write_bw() {
  local size=$1
  shift
  perftest ib_write_bw -s "$size" -n 100 "$@" | awk -v s="$size" '$1 == s && NF >= 4 { print $4 }'
}

# linkpass-perf's time (us) and busbw (GB/s) for one size.
sendrecv() {
  local size=$1 iters=$2
  shift 2
  "$perf" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$plugin" --op sendrecv "$@" \
    -b "$size" -e "$size" -n "$iters" -w $((iters / 10 + 1)) | awk '$1 ~ /^[0-9]+$/ && NF >= 9 { print $6, $8 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > 0 ? a / b : 0) }'; }

for rate in "${rates[@]}"; do
  sed "s/^rate .*/rate $rate/" "$top/tests/simverbs/configs/two-hosts-ib.conf" >"$tmp/fabric.conf"
  "$sv" up "$tmp/fabric.conf" >/dev/null
  for r in $(seq "$rounds"); do
    for s in "${sizes[@]}"; do
      b=$(bytes "$s")
      echo "$rate $b $(write_bw "$b")" >>"$tmp/uni"
      echo "$rate $b $(write_bw "$b" -b)" >>"$tmp/bidi"
      echo "$rate $b $(sendrecv "$b" 10 -R 1 | awk '{ print $2 * 1e9 / 1048576 }')" >>"$tmp/plugin"
    done
  done
  if [ "$rate" = "${rates[0]}" ]; then
    for r in $(seq "$lat_rounds"); do
      lat=$(perftest ib_write_lat -s 8 -n 20000 | awk '$1 == 8 && NF >= 6 { print $5, $6 }')
      echo "$lat $(sendrecv 8 "$lat_iters" -R 0 | awk '{ print $1 }')" >>"$tmp/lat"
    done
  fi
  "$sv" down >/dev/null
done

for rate in "${rates[@]}"; do
  echo "# sendrecv busbw against ib_write_bw, 2 hosts, mlx5_0 at $rate Gb/s; median of $rounds interleaved rounds"
  echo "# MB = 2^20 bytes (perftest's unit)"
  printf '%12s %12s %14s %12s %10s %10s\n' "bytes" "ib_write_bw" "ib_write_bw -b" "sendrecv" "vs one-way" "vs -b"
  printf '%12s %12s %14s %12s %10s %10s\n' "" "MB/s" "MB/s per dir" "busbw MB/s" "" ""
  for s in "${sizes[@]}"; do
    b=$(bytes "$s")
    uni=$(awk -v r="$rate" -v s="$b" '$1 == r && $2 == s { print $3 }' "$tmp/uni" | median)
    bidi=$(awk -v r="$rate" -v s="$b" '$1 == r && $2 == s { print $3 / 2 }' "$tmp/bidi" | median)
    mine=$(awk -v r="$rate" -v s="$b" '$1 == r && $2 == s { print $3 }' "$tmp/plugin" | median)
    printf '%12s %12.0f %14.0f %12.0f %10.2f %10.2f\n' "$b" "$uni" "$bidi" "$mine" "$(ratio "$mine" "$uni")" \
      "$(ratio "$mine" "$bidi")"
  done
  echo
done
echo "# 8-byte latency, us (fabric latency 1 us per work request); $lat_rounds pairs, each ib_write_lat then sendrecv"
printf '%6s %22s %22s %16s %12s %12s\n' "pair" "ib_write_lat typical" "ib_write_lat average" "sendrecv (avg)" "vs typical" "vs average"
awk '{ printf "%6d %22.2f %22.2f %16.2f %12.2f %12.2f\n", NR, $1, $2, $3, $3 / $1, $3 / $2 }' "$tmp/lat"
printf '%6s %22.2f %22.2f %16.2f %12.2f %12.2f\n' "median" "$(awk '{ print $1 }' "$tmp/lat" | median)" \
  "$(awk '{ print $2 }' "$tmp/lat" | median)" "$(awk '{ print $3 }' "$tmp/lat" | median)" \
  "$(awk '{ print $3 / $1 }' "$tmp/lat" | median)" "$(awk '{ print $3 / $2 }' "$tmp/lat" | median)"
