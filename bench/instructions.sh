#!/usr/bin/env bash
# Instructions an iteration, two plugins side by side, without the
# machine's noise: rank 0 of one checked sendrecv per plugin runs under
# callgrind (valgrind), and the instructions it executed are split by
# object (the plugin itself, simverbs, libc, the driver) and, for the
# plugins, by function, divided by the iterations.  A count, not a time:
# it says how much work each plugin's code does per message, which the
# timed benchmarks (bench/plugin_pairs.sh) cannot separate from how the
# two cores were shared (docs/PERFORMANCE.md, issue 10).
#
# Under callgrind rank 0 runs some 50 times slower than rank 1, so on an
# idle machine it almost never waits: its test() calls find their work
# done, and the counts an iteration are those of the work, with little of
# the spin.  On a loaded machine rank 1 gets less of the CPU, rank 0's
# test() spins more, and the counts an iteration grow with it; what one
# call of isend, irecv or test costs (the second table) moves much less.
#
# usage: bench/instructions.sh BUILD_DIR [SIZE]   (default 8 bytes)
#   env: A, B    the two plugins (default: this build's linkpass and the
#                reference plugin built by tests/peers/ibext.sh)
#        ITERS   iterations (default 20000)
#        KEEP    a directory to keep the two callgrind files in (A.out,
#                B.out), for callgrind_annotate
set -euo pipefail
build=$(cd "${1:?usage: instructions.sh BUILD_DIR [SIZE]}" && pwd)
size=${2:-8}
iters=${ITERS:-20000}
top=$(cd "$(dirname "$0")/.." && pwd)
a=${A:-$build/lib/libnccl-net-linkpass.so}
b=${B:-$build/tests/peers/ibext/libnccl-net-ibext.so}
command -v valgrind >/dev/null || { echo "instructions: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
for f in "$build/simverbs/simverbs" "$build/bench/linkpass-perf" "$a" "$b"; do
  [ -e "$f" ] || { echo "instructions: $f is missing (build first; the reference plugin: bash tests/peers/ibext.sh)" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/lpinstr.XXXXXX)
fabric="instr$$"
cleanup() {
  "$build/simverbs/simverbs" down --fabric "$fabric" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# The driver starts each rank through `simverbs run ... -- COMMAND`: this
# stand-in for simverbs puts rank 0's command under callgrind.
cat >"$tmp/simverbs" <<EOF
#!/usr/bin/env bash
args=("\$@")
for ((i = 0; i < \${#args[@]}; i++)); do
  [ "\${args[\$i]}" = --rank ] && [ "\${args[\$((i + 1))]}" = 0 ] || continue
  for ((j = 0; j < \${#args[@]}; j++)); do [ "\${args[\$j]}" = -- ] && break; done
  exec "$build/simverbs/simverbs" "\${args[@]:0:\$((j + 1))}" valgrind --tool=callgrind \\
    --callgrind-out-file="\$CALLGRIND_OUT" "\${args[@]:\$((j + 1))}"
done
exec "$build/simverbs/simverbs" "\$@"
EOF
chmod +x "$tmp/simverbs"
"$build/simverbs/simverbs" up "$top/tests/simverbs/configs/two-hosts-ib.conf" --fabric "$fabric" >/dev/null
export NCCL_SHARP_MAX_COMMS=64 # the reference plugin's comms on an IB port
for x in A B; do
  so=$a
  [ "$x" = B ] && so=$b
  CALLGRIND_OUT="$tmp/$x.out" "$build/bench/linkpass-perf" --fabric "$fabric" --simverbs "$tmp/simverbs" \
    --hosts node0,node1 --plugin "$so" --timeout 900 -N 2 --op sendrecv -R 1 -b "$size" -e "$size" -n "$iters" -w 100 \
    -c 1 >"$tmp/$x.log" 2>&1 || { cat "$tmp/$x.log" >&2; exit 1; }
done
echo "# sendrecv -R 1, $size bytes, $iters iterations (+100 warm-up), rank 0 under callgrind"
echo "# A: $a"
echo "# B: $b"
python3 "$top/bench/callgrind_split.py" "$tmp/A.out" "$tmp/B.out" $((iters + 100))
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && cp "$tmp/A.out" "$tmp/B.out" "$KEEP/"
fi
