#!/usr/bin/env bash
# A peer host that freezes while a link is down.  On a namespace-backed
# fabric, rank 1's host is cut off the management network at its switch
# port (so its kernel answers nothing any more, as a frozen or powered-off
# host) and its process is stopped; then node0:mlx5_0's cable is pulled.
# Rank 0's moves need the control connection to rank 1: it must fail with
# a clear error naming the peer within ~15 s (TCP_USER_TIMEOUT and
# keepalive on the control socket), never hang for TCP's ~15 minutes.
# Needs root and network namespaces: skipped (exit 77) where they cannot be
# made.
# usage: peer_host_frozen.sh     (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
require_netns

start_sink
"$SIMVERBS" up "$CONFS/two-hosts-4nic-netns.conf" >"$tmp/up.txt" 2>&1 || fail "simverbs up: $(cat "$tmp/up.txt")"
ns0="sv-$SIMVERBS_FABRIC-node0" sw="sv-$SIMVERBS_FABRIC-sw"
addr=$("$SIMVERBS" host-addr node0)
ns_prefix=(ip netns exec "$ns0")
perf_opts=(--rendezvous-addr "$addr")
# The move deadline (3 x 20 s here) stays out of the way: TCP's own
# liveness (TCP_USER_TIMEOUT, keepalive; 10 s) must find the host.
export NCCL_SOCKET_IFNAME=mgmt0 LINKPASS_MOVE_TIMEOUT_MS=20000

run_perf 1M 60
frozen=$(awk '$2 == "rank" && $3 == 1 && $4 == "pid" { print $5; exit }' "$tmp/out")
[ -n "$frozen" ] || fail "no pid for rank 1 in the driver's header"
on_exit+=("kill -CONT $frozen 2>/dev/null" "ip -n $sw link set h1m up 2>/dev/null")
# Hold node0:mlx5_0's writes in flight for 3 s, so that rank 0 has sends
# outstanding (which NCCL, and the driver, keep testing) when its peer
# freezes: otherwise it may be waiting for rank 1 out of band, where no
# plugin can help.
sv fault node0:mlx5_0 delay 3000000
sleep 0.3 # lets rank 0 post sends behind the delay; not synchronisation
ip -n "$sw" link set h1m down # node1's management cable, at the switch
kill -STOP "$frozen"
t0=$SECONDS
sv link node0:mlx5_0 down
ended() { ! kill -0 "$perf" 2>/dev/null; }
wait_until 40 "the driver gives up on the frozen host" ended
took=$((SECONDS - t0))
rc=0
wait "$perf" || rc=$?
perf=""
((rc != 0)) || fail "the run succeeded with its peer host frozen"
((took <= 25)) || fail "the frozen host was noticed only after ${took} s"
# The error names the connection's peer (rank 1's management address) and why.
grep -E "connection 0x[0-9a-f]+ on mlx5_[0-9]:1 to [^ ]+ \(198\.18\.255\.2:[0-9]+\).*(Connection timed out|timed out: the peer process or host is gone)" "$tmp/out" ||
  fail "no error naming the peer and the timeout"
echo "PASS peer_host_frozen: rank 0 gave up on the frozen host after ${took} s"
