#!/usr/bin/env bash
# Namespace-backed links: `ip link set <if> down|up` in a host's namespace
# pulls and reinserts that port's cable, as seen by ibv_devinfo and by
# ibv_asyncwatch (PORT_ERR, PORT_ACTIVE); the peer's port on the same rail
# stays up; the switch side of a cable pulls it too; `simverbs link` goes
# through the interface; `down` leaves no namespace, interface or process,
# also after a crash.
# usage: netns.sh CONFIG   (two hosts node0 and node1, `netns on`, IB NICs
#                          mlx5_0 and mlx5_1 at least, on interfaces ib0, ib1)
source "$(dirname "$0")/lib.sh"
sv_require_netns
config=$1
ns0=sv-$FABRIC-node0 ns1=sv-$FABRIC-node1 sw=sv-$FABRIC-sw
aw=$(mktemp)
# On failure, show what the NIC's owner and the watcher saw before `down`
# removes the watcher's log.
diagnose() {
  echo "--- ibv_asyncwatch on node0:mlx5_1:"
  cat "$aw"
  echo "--- watch.log:"
  cat "/dev/shm/simverbs-$FABRIC.d/watch.log" 2>/dev/null || true
  "$SIMVERBS" status --fabric "$FABRIC" 2>&1 | head -20 || true
}
trap 'rc=$?; [ "$rc" = 0 ] || [ "$rc" = 77 ] || diagnose; rm -f "$aw"; sv_cleanup' EXIT
# Interfaces in this namespace that look like ours: there must never be any.
stray_links() {
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
    grep -E '^(h[0-9]+(d[0-9]+p[0-9]+|m)|rail[0-9]+p[0-9]+|mgmt0?)$' || true
}

# "PORT_ACTIVE" or "PORT_DOWN", as the host's own ibv_devinfo reports it.
port_state() {
  sv_run "$1" ibv_devinfo -d "$2" | sed -n 's/^[[:space:]]*state:[[:space:]]*\(PORT_[A-Z]*\).*/\1/p'
}
state_is() { [ "$(port_state "$1" "$2")" = "$3" ]; }
expect_state() {
  local got
  got=$(port_state "$1" "$2")
  [ "$got" = "$3" ] || fail "$1:$2 is ${got:-unknown}, expected $3 ($4)"
}
events() { grep -c "$1" "$aw" || true; }
watcher_pids() { pgrep -f "simverbs watch --fabric $FABRIC\$" || true; }
our_namespaces() { ip netns list | awk '{print $1}' | grep -- "^sv-$FABRIC-" || true; }

sv_up "$config"

echo "== layout"
for ns in "$ns0" "$ns1" "$sw"; do
  [ -e "/run/netns/$ns" ] || [ -e "/var/run/netns/$ns" ] || fail "namespace $ns was not created"
done
watcher=$(watcher_pids)
[ -n "$watcher" ] || fail "no link watcher runs for fabric $FABRIC"
[ -z "$(stray_links)" ] || fail "interfaces appeared outside the namespaces: $(stray_links)"
# `run` enters the host's namespace: its own interfaces, a /sys that shows them.
host_links=$("$SIMVERBS" run --host node0 -- ip -br link)
echo "$host_links"
for ifname in lo mgmt0 ib0 ib1; do
  grep -qE "^$ifname(@[^ ]*)? .*[<,]UP[,>]" <<<"$host_links" || fail "$ifname is missing or not up in $ns0"
done
[ "$("$SIMVERBS" run --host node0 -- cat /sys/class/net/ib1/operstate)" = up ] ||
  fail "/sys/class/net in node0 does not show its ib1 as up"
ip -n "$ns1" -br addr show mgmt0 | grep -q '198\.18\.255\.2/24' || fail "node1 has no management address"
[ "$("$SIMVERBS" host-addr node1)" = 198.18.255.2 ] || fail "host-addr node1 is not 198.18.255.2"
# The management network connects the hosts: node0's kernel answers a
# connection to a port nobody listens on (discard, 9) with a reset.
out=$(LC_ALL=C timeout 10 "$SIMVERBS" run --host node1 -- bash -c 'exec 3<>/dev/tcp/198.18.255.1/9' 2>&1) &&
  fail "a closed port on node0 accepted a connection"
grep -q 'refused' <<<"$out" || fail "node1 cannot reach node0 over the management network: $out"

echo "== host side: ip link set ib1 down in $ns0"
sv_spawn "$aw" node0 ibv_asyncwatch -d mlx5_1
wait_until 20 "ibv_asyncwatch opens mlx5_1" grep -q "async event FD" "$aw"
expect_state node0 mlx5_1 PORT_ACTIVE "before the pull"
ip netns exec "$ns0" ip link set ib1 down
wait_until 10 "node0:mlx5_1 goes down" state_is node0 mlx5_1 PORT_DOWN
wait_until 10 "ibv_asyncwatch sees PORT_ERR" grep -q 'IBV_EVENT_PORT_ERR' "$aw"
expect_state node1 mlx5_1 PORT_ACTIVE "the peer on the same rail keeps its link"
expect_state node0 mlx5_0 PORT_ACTIVE "another rail of the same host"
grep -q '1: DOWN' "/dev/shm/simverbs-$FABRIC.d/node0/sys/class/infiniband/mlx5_1/ports/1/state" ||
  fail "the simulated sysfs state of node0:mlx5_1 did not follow"
ip -n "$sw" link show h0d1p1 | grep -q NO-CARRIER || fail "the switch side of node0's cable still has carrier"

echo "== host side: ip link set ib1 up in $ns0"
ip netns exec "$ns0" ip link set ib1 up
wait_until 10 "node0:mlx5_1 comes back" state_is node0 mlx5_1 PORT_ACTIVE
wait_until 10 "ibv_asyncwatch sees PORT_ACTIVE" grep -q 'IBV_EVENT_PORT_ACTIVE' "$aw"

echo "== switch side: ip link set h1d1p1 down in $sw"
ip -n "$sw" link set h1d1p1 down
wait_until 10 "node1:mlx5_1 goes down with its switch port" state_is node1 mlx5_1 PORT_DOWN
expect_state node0 mlx5_1 PORT_ACTIVE "node0's cable on the same rail is intact"
ip -n "$sw" link set h1d1p1 up
wait_until 10 "node1:mlx5_1 comes back with its switch port" state_is node1 mlx5_1 PORT_ACTIVE
[ "$(events IBV_EVENT_PORT_ERR)" = 1 ] && [ "$(events IBV_EVENT_PORT_ACTIVE)" = 1 ] ||
  fail "node0's mlx5_1 saw events for node1's cable"

echo "== simverbs link goes through the interface"
"$SIMVERBS" link node0:mlx5_0 down
expect_state node0 mlx5_0 PORT_DOWN "after simverbs link down returned"
ip -n "$ns0" link show ib0 | grep -qE '[<,]UP[,>]' && fail "simverbs link down left ib0 up"
"$SIMVERBS" link node0:mlx5_0 up
expect_state node0 mlx5_0 PORT_ACTIVE "after simverbs link up returned"

echo "== down leaves nothing behind"
kill "$SV_LAST" 2>/dev/null || true
wait "$SV_LAST" 2>/dev/null || true
SV_PIDS=()
"$SIMVERBS" down --fabric "$FABRIC"
[ -z "$(our_namespaces)" ] || fail "namespaces left after down: $(our_namespaces)"
[ -z "$(watcher_pids)" ] || fail "the link watcher still runs after down: $(watcher_pids)"
[ -z "$(stray_links)" ] || fail "interfaces left after down: $(stray_links)"
[ ! -e "/dev/shm/simverbs-$FABRIC" ] && [ ! -e "/dev/shm/simverbs-$FABRIC.d" ] || fail "fabric files left after down"

echo "== down cleans up after a crash"
sv_up "$config"
watcher=$(watcher_pids)
[ -n "$watcher" ] || fail "no link watcher after the second up"
kill -9 "$watcher"
rm "/dev/shm/simverbs-$FABRIC" # as if `up` had died before its rename: only the run directory is left
out=$("$SIMVERBS" down --fabric "$FABRIC") || fail "down after a crash failed: $out"
echo "$out"
[ -z "$(our_namespaces)" ] || fail "namespaces left after down: $(our_namespaces)"
[ ! -e "/dev/shm/simverbs-$FABRIC.d" ] || fail "the run directory was left"
"$SIMVERBS" down --fabric "$FABRIC" >/dev/null 2>&1 && fail "a second down found something to remove"
echo "PASS"
