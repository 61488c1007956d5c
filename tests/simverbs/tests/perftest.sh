#!/usr/bin/env bash
# A perftest program (ib_write_bw, ib_write_lat, ib_send_bw, ib_read_bw, ib_atomic_*)
# between two processes on the simulated fabric; checks its figures are sane.
# usage: perftest.sh CONFIG PROGRAM [perftest options...]
source "$(dirname "$0")/lib.sh"
config=$1 prog=$2
shift 2
sv_up "$config"
port=$(free_port)
out=$(mktemp)
trap 'rm -f "$out"; sv_cleanup' EXIT
# --use_old_post_send: the generic verbs path; -F: no CPU-frequency warning gate.
sv_spawn "$out" node0 timeout 120 "$prog" -d mlx5_0 -p "$port" -F "$@"
server=$SV_LAST
wait_listen "$port" "$server" "$out"
client_out=$(sv_run node1 timeout 120 "$prog" -d mlx5_0 -p "$port" -F "$@" 127.0.0.1 2>&1) ||
  fail "client failed: $client_out"
wait "$server" || fail "server failed: $(cat "$out")"
echo "$client_out"
# The result table's data lines start with the message size in bytes.
lines=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' <<<"$client_out" || true)
[ -n "$lines" ] || fail "no result lines in the output"
# Every figure must be a positive number: a zero bandwidth or latency means
# nothing moved.
while read -r size iters a b rest; do
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > 0) }' || fail "non-positive figure in: $size $iters $a $b $rest"
done <<<"$lines"
echo "PASS"
