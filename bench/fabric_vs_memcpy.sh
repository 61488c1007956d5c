#!/usr/bin/env bash
# Peak ib_write_bw on the simulated fabric next to this machine's
# single-thread memcpy bandwidth, measured in the same run.
# usage: bench/fabric_vs_memcpy.sh BUILD_DIR [SIZE_BYTES...]
set -euo pipefail
build=${1:?usage: fabric_vs_memcpy.sh BUILD_DIR [SIZE...]}
shift
sizes=("${@:-65536 1048576 4194304}")
read -r -a sizes <<<"${sizes[*]}"
sv="$build/simverbs/simverbs"
memcpy_bw="$build/bench/memcpy_bw"
conf="$(dirname "$0")/../tests/simverbs/configs/two-hosts-ib.conf"
export SIMVERBS_FABRIC="bench$$"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null
  "$sv" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
# Rate 400 Gb/s: the wire must not be what limits this measurement.
fast_conf=$(mktemp)
sed 's/^rate .*/rate 400/' "$conf" >"$fast_conf"
"$sv" up "$fast_conf" >/dev/null
rm -f "$fast_conf"

printf '%12s %14s %14s %8s\n' "bytes" "ib_write_bw" "memcpy" "ratio"
printf '%12s %14s %14s %8s\n' "" "MB/s" "MB/s" ""
for size in "${sizes[@]}"; do
  iters=$((size >= 1048576 ? 2000 : 20000))
  port=$((20000 + RANDOM % 30000))
  "$sv" run --host node0 -- ib_write_bw -d mlx5_0 -p "$port" -F -s "$size" -n "$iters" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 400); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.05; done
  out=$("$sv" run --host node1 -- ib_write_bw -d mlx5_0 -p "$port" -F -s "$size" -n "$iters" 127.0.0.1)
  wait "$server"
  server=""
  # Result line: bytes iterations BW-peak BW-average MsgRate
  fabric=$(awk -v s="$size" '$1 == s && NF >= 4 { print $4 }' <<<"$out")
  copy=$("$memcpy_bw" "$size" "$iters")
  ratio=$(awk -v a="$fabric" -v b="$copy" 'BEGIN { printf "%.2f", a / b }')
  printf '%12s %14s %14s %8s\n' "$size" "$fabric" "$copy" "$ratio"
done
