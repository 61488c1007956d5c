#!/usr/bin/env bash
# One size, two plugins, alternated run by run on one fabric: the ratio of
# each pair and their median (docs/PERFORMANCE.md, issue 10).  For the
# small gaps that the sweeps of bench/linkpass_vs_ibext.sh cannot separate
# from the machine's noise: many short runs of one size, each plugin right
# after the other, in turns (A B, B A, ...).
#
# usage: bench/plugin_pairs.sh BUILD_DIR SIZE
#   env: A, B     the two plugins (default: this build's linkpass, and the
#                 reference plugin built by tests/peers/ibext.sh)
#        PAIRS    pairs of runs (default 11)
#        ITERS    iterations a run (default 60000)
#        RANKS    2 or 4 (default 2)
#        LATENCY  1: compare the time of an iteration (A / B: below 1 is A
#                 faster); else busbw (A / B: above 1 is A faster)
#        B_BUILD  another build directory: B runs on that build's fabric and
#                 driver (B defaults to A), to weigh a change of the fabric
#        A_ENV, B_ENV  settings for one side's runs only ("LINKPASS_STANDBY=0"):
#                 with B=A, what a setting costs, side by side
#        WARMUP   warm-up iterations before the timed ones (default 100)
# Every run is a checked sendrecv with registered buffers (-R 1) on
# two-hosts-ib.conf; a run with a wrong element stops the script.
set -euo pipefail
build=$(cd "${1:?usage: plugin_pairs.sh BUILD_DIR SIZE}" && pwd)
size=${2:?usage: plugin_pairs.sh BUILD_DIR SIZE}
top=$(cd "$(dirname "$0")/.." && pwd)
a=${A:-$build/lib/libnccl-net-linkpass.so}
b_build=$build
[ -n "${B_BUILD:-}" ] && b_build=$(cd "$B_BUILD" && pwd)
b=${B:-$([ "$b_build" != "$build" ] && echo "$a" || echo "$build/tests/peers/ibext/libnccl-net-ibext.so")}
for f in "$build/simverbs/simverbs" "$build/bench/linkpass-perf" "$b_build/simverbs/simverbs" \
  "$b_build/bench/linkpass-perf" "$a" "$b"; do
  [ -e "$f" ] || { echo "plugin_pairs: $f is missing (build first; the reference plugin: bash tests/peers/ibext.sh)" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/lppairs.XXXXXX)
cleanup() {
  "$build/simverbs/simverbs" down --fabric "pairs$$a" >/dev/null 2>&1 || true
  "$b_build/simverbs/simverbs" down --fabric "pairs$$b" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
"$build/simverbs/simverbs" up "$top/tests/simverbs/configs/two-hosts-ib.conf" --fabric "pairs$$a" >/dev/null
if [ "$b_build" != "$build" ]; then
  "$b_build/simverbs/simverbs" up "$top/tests/simverbs/configs/two-hosts-ib.conf" --fabric "pairs$$b" >/dev/null
fi
export NCCL_SHARP_MAX_COMMS=64 # the reference plugin's comms on an IB port
field='$(NF - 1)'              # busbw
[ "${LATENCY:-0}" = 1 ] && field='$(NF - 3)'
# run PLUGIN BUILD SETTINGS: one run on BUILD's fabric; prints its figure
run() {
  local fabric="pairs$$a"
  [ "$2" != "$build" ] && fabric="pairs$$b"
  # shellcheck disable=SC2086 # SETTINGS: words of NAME=VALUE
  env ${3:-} "$2/bench/linkpass-perf" --fabric "$fabric" --simverbs "$2/simverbs/simverbs" --hosts node0,node1 --plugin "$1" --timeout 300 \
    -N "${RANKS:-2}" --op sendrecv -R 1 -b "$size" -e "$size" -n "${ITERS:-60000}" -w "${WARMUP:-100}" -c 1 >"$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; exit 1; }
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 { if ($NF != 0) bad = 1; v = '"$field"' } END { if (bad) exit 1; print v }' "$tmp/out" ||
    { echo "plugin_pairs: wrong elements with $1" >&2; cat "$tmp/out" >&2; exit 1; }
}
what=busbw
[ "${LATENCY:-0}" = 1 ] && what="time (us)"
echo "# sendrecv -R 1, $size, ${RANKS:-2} ranks, ${ITERS:-60000} iterations a run; $what"
echo "# A: $a"
echo "# B: $b"
[ "$b_build" != "$build" ] && echo "# A on the fabric of $build, B on that of $b_build"
[ -n "${A_ENV:-}" ] && echo "# A with $A_ENV"
[ -n "${B_ENV:-}" ] && echo "# B with $B_ENV"
printf '%6s %12s %12s %8s\n' pair A B "A / B"
for i in $(seq "${PAIRS:-11}"); do
  # The order turns each pair (A B, then B A): a plugin that always ran
  # first or always second would carry whatever the order costs.
  if ((i % 2)); then
    x=$(run "$a" "$build" "${A_ENV:-}")
    y=$(run "$b" "$b_build" "${B_ENV:-}")
  else
    y=$(run "$b" "$b_build" "${B_ENV:-}")
    x=$(run "$a" "$build" "${A_ENV:-}")
  fi
  printf '%6d %12s %12s %8.3f\n' "$i" "$x" "$y" "$(awk -v x="$x" -v y="$y" 'BEGIN { print x / y }')"
done | tee "$tmp/pairs"
# The median's 95 % interval, from the sorted ratios alone (no assumption
# about their spread, which is wide and lopsided here): the k-th smallest
# and the k-th largest, k = (n - 1.96 sqrt(n)) / 2.  A run's figure
# depends on how the two cores were shared for its length, so single
# pairs scatter by tens of per cent; a gap of a few per cent needs
# hundreds of pairs to be told from none (docs/PERFORMANCE.md).
awk '{ print $4 }' "$tmp/pairs" | sort -g |
  awk '{ v[NR] = $1 } END {
    k = int((NR - 1.96 * sqrt(NR)) / 2); if (k < 1) k = 1
    printf "median A / B over %d pairs: %.3f (lowest %.3f, highest %.3f)\n", NR, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR]
    if (NR >= 6) printf "95%% interval of the median: %.3f to %.3f\n", v[k], v[NR + 1 - k]
    else print "95% interval of the median: too few pairs (6 or more)" }'
