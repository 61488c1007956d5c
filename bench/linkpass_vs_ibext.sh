#!/usr/bin/env bash
# linkpass against the reference IB plugin (NVIDIA/Mellanox
# nccl-rdma-sharp-plugins, "ibext", unmodified): the same driver
# (linkpass-perf), the same fabric, in one run, A/B alternated run by run
# (docs/PERFORMANCE.md).
#
# usage: bench/linkpass_vs_ibext.sh BUILD_DIR            the tables
#        bench/linkpass_vs_ibext.sh BUILD_DIR --cable    the cable pull, side by side
#   env: ROUNDS (A/B pairs per configuration, default 5), LAT_ROUNDS (8-byte
#        latency pairs, default 9), LAT_ITERS (default 5000), BIG (also
#        sendrecv 128M..1G, default 1), CONFIGS (a subset of the names below),
#        IBEXT (the reference plugin; default BUILD_DIR/tests/peers/ibext/,
#        built there with tests/peers/ibext.sh when missing), SIMVERBS (the
#        simverbs tool, default BUILD_DIR/simverbs/simverbs),
#        --cable only: DURATION (s, default 12), PULL_S (s the cable stays
#        out, default 3)
#
# Bandwidth: nccl-tests' busbw per size, the median over ROUNDS runs of each
# plugin, and linkpass / ibext of the medians.  Runs alternate A B, then B A,
# ... so drift on this shared machine hits both alike.  Each configuration is
# one linkpass-perf command line; `pad64` adds --reg-pad 64: every
# registration (slots, and user buffers with -R 1) ends 64 bytes into a page.
# Latency: 8-byte sendrecv (-R 0, NCCL's path for small messages), time per
# iteration averaged over LAT_ITERS, pair by pair; the median of the pairs'
# ratios.
#
# --cable: both plugins run the same checked all_reduce at the same time on
# one fabric; the cable of node0:mlx5_0 (rank 0's NIC for both) is pulled for
# PULL_S seconds, longer than the retry budget of NCCL_IB_TIMEOUT=14
# (4.096 us x 2^14 x 8 tries = 0.54 s).  The reference plugin ends in
# IBV_WC_RETRY_EXC_ERR; linkpass moves to mlx5_1 and goes on with #wrong 0.
# Exit 0 only when exactly that happened (tests/peers runs it as a test).
set -uo pipefail
build=$(cd "${1:?usage: linkpass_vs_ibext.sh BUILD_DIR [--cable]}" && pwd)
mode=${2:-tables}
top=$(cd "$(dirname "$0")/.." && pwd)
sv=${SIMVERBS:-$build/simverbs/simverbs}
perf="$build/bench/linkpass-perf"
lp="$build/lib/libnccl-net-linkpass.so"
peers=${LINKPASS_PEERS_DIR:-$top/../shared/peers}
ib=${IBEXT:-$build/tests/peers/ibext/libnccl-net-ibext.so}
conf="$top/tests/simverbs/configs/two-hosts-ib.conf"
fabric="lvi$$"
tmp=$(mktemp -d /tmp/lpvsib.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$sv" down --fabric "$fabric" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "linkpass_vs_ibext: $*" >&2; exit 2; }

for f in "$perf" "$lp"; do [ -e "$f" ] || die "$f is missing: build $build first"; done
if [ ! -f "$ib" ]; then
  bash "$top/tests/peers/ibext.sh" build "$peers" "$(dirname "$ib")" >&2
  rc=$?
  [ "$rc" -eq 77 ] && exit 77
  [ "$rc" -eq 0 ] && [ -f "$ib" ] || die "could not build the reference plugin into $(dirname "$ib")"
fi
"$sv" up "$conf" --fabric "$fabric" >/dev/null || die "simverbs up $conf failed"
"$sv" run --host node0 --fabric "$fabric" -- test -e /sys/class/infiniband/mlx5_0/device ||
  die "under 'simverbs run', /sys/class/infiniband/mlx5_0/device does not exist: the reference plugin needs the simulated host's sysfs at /sys"
# With IB ports the reference plugin's maxComms is NCCL_SHARP_MAX_COMMS (default 1).
export NCCL_SHARP_MAX_COMMS=64

# perf PLUGIN ARGS...: one linkpass-perf run on the fabric, ranks on node0,node1.
perf() {
  local plugin=$1
  shift
  "$perf" --fabric "$fabric" --simverbs "$sv" --hosts node0,node1 --plugin "$plugin" --timeout 300 "$@"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ---------------------------------------------------------------- --cable
if [ "$mode" = "--cable" ]; then
  duration=${DURATION:-12} pull=${PULL_S:-3}
  export NCCL_IB_TIMEOUT=14
  args=(-N 2 --op all_reduce -e 4M --duration "$duration" -c 2)
  perf "$lp" "${args[@]}" >"$tmp/lp" 2>&1 &
  lp_pid=$!
  perf "$ib" "${args[@]}" >"$tmp/ib" 2>&1 &
  ib_pid=$!
  pids+=("$lp_pid" "$ib_pid")
  # Pull the cable once both runs have reported their second second:
  # traffic of both is on the wire, through mlx5_0.
  line() { grep -qE '^ +2\.0 +[0-9]+ ' "$1"; }
  deadline=$((SECONDS + 120))
  until line "$tmp/lp" && line "$tmp/ib"; do
    ((SECONDS < deadline)) || die "the runs did not get going within 120 s: $(tail -3 "$tmp/lp" "$tmp/ib")"
    kill -0 "$lp_pid" 2>/dev/null && kill -0 "$ib_pid" 2>/dev/null ||
      die "a run ended before the cable was pulled: $(tail -5 "$tmp/lp" "$tmp/ib")"
    sleep 0.1
  done
  t_pull=$(date +%s.%N)
  "$sv" link node0:mlx5_0 down --fabric "$fabric" >/dev/null
  sleep "$pull" # the outage itself: longer than the retry budget
  "$sv" link node0:mlx5_0 up --fabric "$fabric" >/dev/null
  t_plug=$(date +%s.%N)
  lp_rc=0 ib_rc=0
  wait "$lp_pid" || lp_rc=$?
  wait "$ib_pid" || ib_rc=$?
  pids=()
  # the per-second lines, side by side (the reference plugin's stop early)
  awk '/^ +[0-9]+\.0 +[0-9]+ / { print $1, $2, $4, $5 }' "$tmp/lp" >"$tmp/lp.s"
  awk '/^ +[0-9]+\.0 +[0-9]+ / { print $1, $2, $4, $5 }' "$tmp/ib" >"$tmp/ib.s"
  echo "# the same checked all_reduce (4 MiB, 2 ranks, node0 and node1) through both plugins at once;"
  printf '# node0:mlx5_0 pulled for %.1f s (retry budget 0.54 s with NCCL_IB_TIMEOUT=14)\n' \
    "$(awk -v a="$t_pull" -v b="$t_plug" 'BEGIN { print b - a }')"
  printf '%6s | %26s | %26s\n' "" "linkpass" "reference (ibext)"
  printf '%6s | %6s %10s %8s | %6s %10s %8s\n' "time" "iters" "busbw GB/s" "#wrong" "iters" "busbw GB/s" "#wrong"
  n=$(($(wc -l <"$tmp/lp.s") > $(wc -l <"$tmp/ib.s") ? $(wc -l <"$tmp/lp.s") : $(wc -l <"$tmp/ib.s")))
  end_ib="(exit $ib_rc)"
  grep -q "IBV_WC_RETRY_EXC_ERR" "$tmp/ib" && end_ib="RETRY_EXC_ERR, exit $ib_rc"
  for i in $(seq "$n"); do
    a=$(sed -n "${i}p" "$tmp/lp.s") b=$(sed -n "${i}p" "$tmp/ib.s")
    # shellcheck disable=SC2086
    set -- $a
    t=${1:-} la=$(printf '%6s %10s %8s' "${2:-}" "${3:-}" "${4:-}")
    # shellcheck disable=SC2086
    set -- $b
    [ -z "$t" ] && t=${1:-}
    if [ -n "$b" ]; then rb=$(printf '%6s %10s %8s' "$2" "$3" "$4"); else rb=$(printf '%-26s' " $end_ib"); end_ib=""; fi
    printf '%6s | %s | %s\n' "$t" "$la" "$rb"
  done
  lp_wrong=$(sed -nE 's/^# Wrong elements +: (.*)$/\1/p' "$tmp/lp")
  lp_fo=$(grep -c "event=failover" "$tmp/lp")
  lp_fb=$(grep -c "event=failback" "$tmp/lp")
  ib_err=$(grep -m1 -oE "status=IBV_WC_[A-Z_]+\([0-9]+\) opcode=[A-Z_]+\([0-9]+\)" "$tmp/ib")
  echo "linkpass : exit $lp_rc, wrong elements: ${lp_wrong:-?}, failover lines $lp_fo, failback lines $lp_fb"
  echo "reference: exit $ib_rc, ${ib_err:-no completion error}"
  ok=1
  [ "$lp_rc" -eq 0 ] && [ "${lp_wrong:-}" = "0 OK" ] && [ "$lp_fo" -gt 0 ] || ok=0
  [ "$ib_rc" -ne 0 ] && grep -q "IBV_WC_RETRY_EXC_ERR" "$tmp/ib" || ok=0
  if [ "$ok" -ne 1 ]; then
    echo "--- linkpass output" >&2; cat "$tmp/lp" >&2
    echo "--- reference output" >&2; cat "$tmp/ib" >&2
    die "not the expected picture (linkpass exit 0, #wrong 0, a failover; the reference plugin RETRY_EXC_ERR)"
  fi
  exit 0
fi

# ---------------------------------------------------------------- tables
rounds=${ROUNDS:-5}
lat_rounds=${LAT_ROUNDS:-9}
lat_iters=${LAT_ITERS:-5000}
big=${BIG:-1}
# name | flags (every size of the sweep in one run)
all_configs=(
  "sendrecv.2r.R1|-N 2 --op sendrecv -R 1 -b 8 -e 64M -f 2 -n 20 -w 3"
  # the same traffic long enough to be past what follows set-up (seconds
  # of iterations per size, not milliseconds)
  "sendrecv.2r.R1.steady|-N 2 --op sendrecv -R 1 -b 64K -e 1M -f 4 -n 30000 -w 100"
  "sendrecv.4r.R1.steady|-N 4 --op sendrecv -R 1 -b 64K -e 1M -f 4 -n 5000 -w 100"
  "all_reduce.2r.R0.steady|-N 2 --op all_reduce -R 0 -b 64K -e 4M -f 4 -n 3000 -w 50"
  "sendrecv.2r.R1.pad64|-N 2 --op sendrecv -R 1 --reg-pad 64 -b 8 -e 64M -f 2 -n 20 -w 3"
  "sendrecv.2r.R0|-N 2 --op sendrecv -R 0 -b 8 -e 64M -f 2 -n 20 -w 3"
  "sendrecv.2r.R0.pad64|-N 2 --op sendrecv -R 0 --reg-pad 64 -b 8 -e 64M -f 2 -n 20 -w 3"
  "sendrecv.4r.R1|-N 4 --op sendrecv -R 1 -b 8 -e 64M -f 4 -n 20 -w 3"
  "all_reduce.2r.R0|-N 2 --op all_reduce -R 0 -b 8 -e 64M -f 4 -n 10 -w 2"
  "all_reduce.2r.R1.pad64|-N 2 --op all_reduce -R 1 --reg-pad 64 -b 8 -e 64M -f 4 -n 10 -w 2"
  "all_reduce.4r.R0|-N 4 --op all_reduce -R 0 -b 8 -e 64M -f 4 -n 10 -w 2"
  "all_reduce.4r.R1.pad64|-N 4 --op all_reduce -R 1 --reg-pad 64 -b 8 -e 64M -f 4 -n 10 -w 2"
  # GPU memory as dma-bufs (docs/GPU.md): registered inside regMrDmaBuf,
  # every receive flushed by a loopback read, by both plugins
  "sendrecv.2r.R1.dmabuf|-N 2 --op sendrecv -R 1 --mem dmabuf -b 8 -e 64M -f 2 -n 20 -w 3"
  "sendrecv.2r.R0.dmabuf|-N 2 --op sendrecv -R 0 --mem dmabuf -b 8 -e 64M -f 2 -n 20 -w 3"
  "all_reduce.2r.R0.dmabuf|-N 2 --op all_reduce -R 0 --mem dmabuf -b 8 -e 64M -f 4 -n 10 -w 2"
)
if [ "$big" = 1 ]; then
  all_configs+=(
    "sendrecv.2r.R1.big|-N 2 --op sendrecv -R 1 -b 128M -e 1G -f 2 -n 4 -w 1"
    "sendrecv.2r.R0.big|-N 2 --op sendrecv -R 0 -b 128M -e 1G -f 2 -n 4 -w 1"
  )
fi
configs=()
for c in "${all_configs[@]}"; do
  if [ -z "${CONFIGS:-}" ] || [[ " $CONFIGS " == *" ${c%%|*} "* ]]; then configs+=("$c"); fi
done
failed=0

# one NAME PLUGIN-TAG PLUGIN ROUND FLAGS...: rows "name tag round size busbw wrong" to $tmp/rows
one() {
  local name=$1 tag=$2 plugin=$3 round=$4 rc
  shift 4
  perf "$plugin" "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "# $name $tag round $round: exit $rc: $(grep -v '^#' "$tmp/out" | grep -vE '^ +[0-9]' | head -3)" >>"$tmp/failures"
    failed=1
  fi
  awk -v n="$name" -v t="$tag" -v r="$round" '$1 ~ /^[0-9]+$/ && NF >= 9 { print n, t, r, $1, $8, $9, $6 }' \
    "$tmp/out" >>"$tmp/rows"
}

start=$SECONDS
for c in "${configs[@]}"; do
  name=${c%%|*} flags=${c#*|}
  for r in $(seq "$rounds"); do
    # A B, then B A: neither plugin always runs first
    if ((r % 2)); then
      one "$name" lp "$lp" "$r" $flags
      one "$name" ib "$ib" "$r" $flags
    else
      one "$name" ib "$ib" "$r" $flags
      one "$name" lp "$lp" "$r" $flags
    fi
  done
done
for r in $(seq "$lat_rounds"); do
  lat="-N 2 --op sendrecv -R 0 -b 8 -e 8 -n $lat_iters -w $((lat_iters / 10))"
  if ((r % 2)); then one lat lp "$lp" "$r" $lat; one lat ib "$ib" "$r" $lat
  else one lat ib "$ib" "$r" $lat; one lat lp "$lp" "$r" $lat; fi
done
elapsed=$((SECONDS - start))

echo "# linkpass vs the reference plugin (ibext), linkpass-perf on simverbs $(basename "$conf"): 2 hosts x 2 IB NICs,"
echo "# $(awk '$1 == "rate" { print $2 }' "$conf") Gb/s; busbw GB/s, median of $rounds runs each, A/B alternated; ratio = linkpass / ibext"
missed=""
for c in "${configs[@]}"; do
  name=${c%%|*} flags=${c#*|}
  echo
  echo "## $name: linkpass-perf $flags"
  printf '%12s %10s %10s %7s %8s\n' "bytes" "linkpass" "ibext" "ratio" "#wrong"
  for s in $(awk -v n="$name" '$1 == n { print $4 }' "$tmp/rows" | sort -n -u); do
    a=$(awk -v n="$name" -v s="$s" '$1 == n && $2 == "lp" && $4 == s { print $5 }' "$tmp/rows" | median)
    b=$(awk -v n="$name" -v s="$s" '$1 == n && $2 == "ib" && $4 == s { print $5 }' "$tmp/rows" | median)
    w=$(awk -v n="$name" -v s="$s" '$1 == n && $4 == s && $6 != "0" { k++ } END { print k + 0 }' "$tmp/rows")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    printf '%12s %10s %10s %7s %8s\n' "$s" "$a" "$b" "$ratio" "$w"
    if [ "$s" -ge 65536 ] && awk -v r="$ratio" 'BEGIN { exit !(r != "-" && r < 1.00) }'; then
      missed="$missed $name@$s=${ratio}x"
    fi
  done
done
echo
echo "## 8-byte sendrecv latency (-R 0, $lat_iters iterations a run), us; $lat_rounds A/B pairs"
printf '%6s %10s %10s %7s\n' "pair" "linkpass" "ibext" "ratio"
for r in $(seq "$lat_rounds"); do
  a=$(awk -v r="$r" '$1 == "lat" && $2 == "lp" && $3 == r { print $7 }' "$tmp/rows")
  b=$(awk -v r="$r" '$1 == "lat" && $2 == "ib" && $3 == r { print $7 }' "$tmp/rows")
  [ -n "$a" ] && [ -n "$b" ] || continue
  printf '%6s %10s %10s %7.2f\n' "$r" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
  echo "$a $b" >>"$tmp/lat"
done
if [ -s "$tmp/lat" ]; then
  lat_ratio=$(awk '{ print $1 / $2 }' "$tmp/lat" | median)
  printf '%6s %10s %10s %7.2f\n' "median" "$(awk '{ print $1 }' "$tmp/lat" | median)" \
    "$(awk '{ print $2 }' "$tmp/lat" | median)" "$lat_ratio"
fi
echo
echo "# target: linkpass >= 1.00x busbw at every size >= 64 KiB, <= 1.00x 8-byte latency"
echo "# busbw below 1.00x at >= 64 KiB:${missed:- none}"
echo "# 8-byte latency ratio (median of pairs): ${lat_ratio:-n/a}"
echo "# $elapsed s"
if [ -s "$tmp/failures" ]; then
  echo "# runs that failed:"
  cat "$tmp/failures"
fi
exit "$failed"
