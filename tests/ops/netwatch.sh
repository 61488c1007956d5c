#!/usr/bin/env bash
# A RoCE cable pull seen through route netlink.  On a namespace-backed RoCE
# fabric (two hosts x 4 NICs, ports backed by veths eth0..eth3), the ranks
# run in their hosts' namespaces and `ip link set eth0 down` in node0's
# namespace pulls the cable.  The fabric's own link watcher is stopped
# first, so the simulated port stays ACTIVE and raises no verbs event: only
# the plugin's netwatch (libnl, RTNLGRP_LINK on the interface behind the
# port) can notice.  It must: the netwatch line first, then the port marked
# down because of the netdev, a failover line per connection end with
# reason port_down (peer_notice on the peer's sending side), and after the
# reinsert and the hold-down, the failback.
# Needs root and network namespaces: skipped (exit 77) where they cannot be
# made.
# usage: netwatch.sh     (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"

require_netns

start_sink
"$SIMVERBS" up "$CONFS/two-hosts-4nic-roce-netns.conf" >"$tmp/up.txt" 2>&1 || fail "simverbs up: $(cat "$tmp/up.txt")"
ns0="sv-$SIMVERBS_FABRIC-node0"
# Stop the fabric's link watcher: ports no longer follow their interfaces.
watcher=$("$SIMVERBS" status | sed -n 's/^ *link watcher: pid \([0-9]*\).*/\1/p')
[ -n "$watcher" ] || fail "no link watcher runs for the fabric"
kill "$watcher"
watcher_gone() { ! kill -0 "$watcher" 2>/dev/null; }
wait_until 5 "the link watcher stops" watcher_gone

# Across namespaces: the launcher runs in node0's namespace and the ranks
# meet it, and each other, on the management network.
addr=$("$SIMVERBS" host-addr node0)
ns_prefix=(ip netns exec "$ns0")
perf_opts=(--rendezvous-addr "$addr")
export NCCL_SOCKET_IFNAME=mgmt0 NCCL_DEBUG=INFO # INFO: the netwatch and port-up lines

run_perf 1M 10
has_line 'netwatch: mlx5_0:1 follows network interface eth0 \(up\)' "$tmp/out" || fail "netwatch does not watch eth0"
ip -n "$ns0" link set eth0 down
wait_until 10 "the netwatch line" has_line 'netwatch: eth0 \(mlx5_0:1\) lost its link' "$tmp/out"
wait_until 10 "mlx5_0:1 marked down because of its interface" has_line 'mlx5_0:1 is down \(netdev eth0 down\)' "$tmp/out"
wait_until 20 "a failover line" has_line 'event=failover .* dev=mlx5_0 ' "$tmp/syslog"
# The simulated port never left ACTIVE: only the interface told.
port_state() {
  "$SIMVERBS" status | awk -v h="$1" -v n="$2" '$1 == "host" { host = $2 } $1 == n { nic = $1 }
    $1 == "port" && $2 == "1" && host == h && nic == n { print $3; exit }'
}
state=$(port_state node0 mlx5_0)
[ "$state" = ACTIVE ] || fail "the simulated port is ${state:-unknown}, not ACTIVE: the test would not show what netwatch does"
# Every connection end on mlx5_0 moves: 2 connections (rank 0 <-> rank 1), 2 ends each.
wait_until 20 "4 failover lines" at_least 'event=failover .* dev=mlx5_0 ' "$tmp/syslog" 4
ip -n "$ns0" link set eth0 up
wait_until 10 "mlx5_0:1 up again through its interface" has_line 'mlx5_0:1 is up again \(netdev eth0 up\)' "$tmp/out"
wait_until 30 "4 failback lines" at_least 'event=failback .* new_dev=mlx5_0 ' "$tmp/syslog" 4
expect_clean_run

# The side whose interface went down moved for port_down; nothing else.
fo=$(grep -c 'event=failover' "$tmp/syslog")
((fo == 4)) || fail "$fo failover lines, expected 4"
grep 'event=failover' "$tmp/syslog" | grep -vqE 'reason=(port_down|peer_notice) ' &&
  fail "a failover line with an unexpected reason"
grep -q 'event=failover .* dir=send .* reason=port_down ' "$tmp/syslog" || fail "node0's sender did not move for port_down"
! grep -q 'is down (port error\|is down (polling' "$tmp/out" || fail "the port event or polling saw the pull, not netwatch"
grep 'netwatch:' "$tmp/out" | head -3
echo "PASS netwatch: eth0 down in $ns0 moved every connection end off mlx5_0, eth0 up brought them back"
