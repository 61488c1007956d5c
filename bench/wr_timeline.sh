#!/usr/bin/env bash
# Where an iteration's time goes, by the fabric's clock: one checked
# sendrecv -R 1 per plugin (two ranks, one message each way an iteration)
# on a copy of simverbs that notes, in each rank, every work request posted,
# every one executed (a NIC's wire, in the simulation: wire time plus
# latency_us after the post, in the first of the posting process's polls
# after that) and every poll that took a completion, with its time.  Both
# ranks read one clock (CLOCK_MONOTONIC), so the segments of an
# iteration's critical path can be told apart: the clear-to-send on the
# wire, the sender's time from its arrival to the data's post, the data on
# the wire, the receiver's time from its arrival to the poll that takes it,
# and from there to the next clear-to-send.  The timed benchmarks
# (bench/plugin_pairs.sh) give one number an iteration; this splits it
# (docs/PERFORMANCE.md, issue 10).
#
# The notes are bench/wr_timeline.patch, applied to a copy of the tracked
# files as they are now (git stash create, else HEAD; untracked files are
# left out): the fabric the tests and the other benchmarks use has none of
# it.  The copy is built in a temporary folder (about a
# minute), and each rank holds its notes in memory touched at load (64 MiB)
# and writes them at exit.
#
# usage: bench/wr_timeline.sh BUILD_DIR [SIZE]   (default 8 bytes)
#   env: A, B    the two plugins (default: this build's linkpass and the
#                reference plugin built by tests/peers/ibext.sh)
#        RUNS    runs of each, alternated (default 3)
#        ITERS   iterations a run (default 200000; at most about 500,000:
#                the notes hold 4 million events a rank)
set -euo pipefail
build=$(cd "${1:?usage: wr_timeline.sh BUILD_DIR [SIZE]}" && pwd)
size=${2:-8}
top=$(cd "$(dirname "$0")/.." && pwd)
a=${A:-$build/lib/libnccl-net-linkpass.so}
b=${B:-$build/tests/peers/ibext/libnccl-net-ibext.so}
for f in "$a" "$b"; do
  [ -e "$f" ] || { echo "wr_timeline: $f is missing (build first; the reference plugin: bash tests/peers/ibext.sh)" >&2; exit 2; }
done
command -v git >/dev/null || { echo "wr_timeline: needs git (the copy is git archive)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/lptimeline.XXXXXX)
fabric="timeline$$"
cleanup() {
  [ -x "$tmp/build/simverbs/simverbs" ] && "$tmp/build/simverbs/simverbs" down --fabric "$fabric" >/dev/null 2>&1
  [ -n "${KEEP:-}" ] && cp -r "$tmp/trace" "$KEEP"
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/src"
tree=$(git -C "$top" stash create)
git -C "$top" archive "${tree:-HEAD}" | tar -x -C "$tmp/src"
(cd "$tmp/src" && git apply "$top/bench/wr_timeline.patch") ||
  { echo "wr_timeline: bench/wr_timeline.patch no longer applies to this simverbs: update it" >&2; exit 1; }
cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log" >&2; exit 1; }
make -C "$tmp/build" -j"$(nproc)" simverbs simverbs_ibverbs linkpass-perf >"$tmp/make.log" 2>&1 || { tail -30 "$tmp/make.log" >&2; exit 1; }
sv="$tmp/build/simverbs/simverbs"
"$sv" up "$top/tests/simverbs/configs/two-hosts-ib.conf" --fabric "$fabric" >/dev/null
export NCCL_SHARP_MAX_COMMS=64 # the reference plugin's comms on an IB port
run() {
  mkdir -p "$tmp/trace/$2"
  SV_TRACE_DIR="$tmp/trace/$2" "$tmp/build/bench/linkpass-perf" --fabric "$fabric" --simverbs "$sv" \
    --hosts node0,node1 --plugin "$1" --timeout 300 -N 2 --op sendrecv -R 1 -b "$size" -e "$size" \
    -n "${ITERS:-200000}" -w 100 -c 1 >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 { if ($NF != 0) bad = 1 } END { exit bad }' "$tmp/out" ||
    { echo "wr_timeline: wrong elements with $1" >&2; cat "$tmp/out" >&2; exit 1; }
}
echo "# sendrecv -R 1, $size, 2 ranks, ${ITERS:-200000} iterations a run, ${RUNS:-3} runs each, alternated"
echo "# A: $a"
echo "# B: $b"
for i in $(seq "${RUNS:-3}"); do
  if ((i % 2)); then run "$a" "A$i"; run "$b" "B$i"; else run "$b" "B$i"; run "$a" "A$i"; fi
done
python3 "$top/bench/wr_timeline.py" "$tmp/trace"
