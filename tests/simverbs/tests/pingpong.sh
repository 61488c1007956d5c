#!/usr/bin/env bash
# Debian's ibv_rc_pingpong between two processes on the simulated fabric.
# The client reaches the server's out-of-band TCP at `simverbs host-addr`:
# loopback, or on a netns fabric (SV_NETNS=1) the server's management address.
# usage: pingpong.sh CONFIG SERVER_HOST CLIENT_HOST [pingpong options...]
source "$(dirname "$0")/lib.sh"
config=$1 server_host=$2 client_host=$3
shift 3
sv_up "$config"
addr=$("$SIMVERBS" host-addr "$server_host" --fabric "$FABRIC") || fail "no address for $server_host"
port=$(free_port)
out=$(mktemp)
trap 'rm -f "$out"; sv_cleanup' EXIT
sv_spawn "$out" "$server_host" timeout 60 ibv_rc_pingpong -d mlx5_0 -p "$port" -n 200 "$@"
server=$SV_LAST
wait_listen "$port" "$server" "$out" "$server_host"
client_out=$(sv_run "$client_host" timeout 60 ibv_rc_pingpong -d mlx5_0 -p "$port" -n 200 "$@" "$addr" 2>&1) ||
  fail "client failed (server at $addr): $client_out"
wait "$server" || fail "server failed: $(cat "$out")"
echo "$client_out"
grep -q "200 iters in" <<<"$client_out" || fail "client did not report its iterations"
grep -q "200 iters in" "$out" || fail "server did not report its iterations: $(cat "$out")"
echo "PASS"
