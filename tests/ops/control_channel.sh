#!/usr/bin/env bash
# The control channel must not ride on the NIC it protects (issue 12).  On
# the namespace-backed InfiniBand fabric (two hosts x 4 NICs; each port
# backed by an interface ib0..ib3, each host reachable out of band on
# mgmt0), ib0 gets an address as IPoIB on mlx5_0 would have, and the
# checked all_reduce runs while node0's ib0 is down for PULL_S seconds
# (default 3): mlx5_0's cable, and with it IPoIB on it.
#   default  NCCL_SOCKET_IFNAME unset: NCCL's own order would take ib0
#            ("ib*" first); each rank takes mgmt0 instead, which no RDMA NIC
#            backs (the NICs' <PCI device>/net/ entries and RoCE GID netdevs
#            are avoided); the connections move at once, and no rank pauses
#            for 1 s or more.
#   pinned   NCCL_SOCKET_IFNAME=ib0, as a job may set it: each rank WARNs
#            that its control channel rides on an RDMA NIC's interface; the
#            same pull then holds the move until the cable returns (the
#            longest pause is printed: the figure of docs/PERFORMANCE.md).
# Both must end with every element right.  Needs root and network
# namespaces: skipped (exit 77) where they cannot be made.
# usage: control_channel.sh default|pinned   (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
case_=${1:?usage: control_channel.sh default|pinned}
pull=${PULL_S:-3}

require_netns
start_sink
"$SIMVERBS" up "$CONFS/two-hosts-4nic-netns.conf" >"$tmp/up.txt" 2>&1 || fail "simverbs up: $(cat "$tmp/up.txt")"
ns0="sv-$SIMVERBS_FABRIC-node0"
# IPoIB on mlx5_0 of each host: ib0 is on rail 0's bridge.
ip -n "$ns0" addr add 198.19.0.1/24 dev ib0
ip -n "sv-$SIMVERBS_FABRIC-node1" addr add 198.19.0.2/24 dev ib0
addr=$("$SIMVERBS" host-addr node0)
ns_prefix=(ip netns exec "$ns0")
perf_opts=(--rendezvous-addr "$addr" --gap-log "$tmp/gaps")
export NCCL_DEBUG=INFO
case $case_ in
default) unset NCCL_SOCKET_IFNAME ;;
pinned) export NCCL_SOCKET_IFNAME=ib0 ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac

run_perf 1M $((pull + 8))
if [ "$case_" = default ]; then
  n=$(count_lines 'out-of-band interface mgmt0 ' "$tmp/out")
  ((n == 2)) || fail "expected both ranks on mgmt0, $n are: $(grep 'out-of-band interface' "$tmp/out")"
else
  n=$(count_lines 'the control channel uses ib0, an interface of one of the RDMA NICs it protects' "$tmp/out")
  ((n == 2)) || fail "expected a WARN from each rank about ib0, found $n"
fi
: >"$tmp/gaps" # the pauses of the pull only
ip -n "$ns0" link set ib0 down
sleep "$pull" # the outage itself
ip -n "$ns0" link set ib0 up
expect_clean_run
grep -q 'event=failover .* dev=mlx5_0 ' "$tmp/syslog" || fail "no connection moved off mlx5_0"
longest=$(awk '{ d = $3 - $2; if (d > m) m = d } END { printf "%.3f", m + 0 }' "$tmp/gaps")
echo "longest pause of a rank during the ${pull} s pull: ${longest} s ($case_)"
if [ "$case_" = default ]; then
  awk -v m="$longest" 'BEGIN { exit !(m < 1.0) }' || fail "a rank paused ${longest} s: the move waited for something"
fi
echo "PASS control_channel $case_"
