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
# The control channel cut (issue 12): ib3 also gets an address, so each
# rank's control channel has a second connection, over ib3 (mgmt0 first).
# node0's management cable is cut, and while it is, mlx5_0's cable is
# pulled for PULL_S seconds: the moves and failbacks must go over ib3, and
# no rank pauses for 1 s or more.
#   cut_host    mgmt0 down in node0 for the pull and 1 s more: shorter than
#               TCP's 10 s, so the first connection lives on and its late
#               copies of the messages arrive once it is back (dropped).
#   cut_switch  node0's port on the management switch down for 14 s: TCP
#               gives the first connections up, each end says so and goes
#               on over the second.
#   cut_twice   cut_switch, then, once the first connections are made again
#               over mgmt0, ib3 (the second connections' interface, and
#               mlx5_3's cable) goes down and mlx5_0 is pulled once more:
#               the moves go over the connections made again.  Without
#               them no control connection is left that works.
#   join_lost   the second connections' SYNs vanish (ib3 addressed, its
#               neighbours' MACs wrong) and LINKPASS_SETUP_TIMEOUT_MS=600 is
#               shorter than the 1 s a connection waits for its second: every
#               connection is made with one control connection, none fails.
# Each must end with every element right.  Needs root and network
# namespaces: skipped (exit 77) where they cannot be made.
# usage: control_channel.sh default|pinned|cut_host|cut_switch|cut_twice|join_lost   (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
case_=${1:?usage: control_channel.sh default|pinned|cut_host|cut_switch|cut_twice|join_lost}
pull=${PULL_S:-3}

require_netns
start_sink
"$SIMVERBS" up "$CONFS/two-hosts-4nic-netns.conf" >"$tmp/up.txt" 2>&1 || fail "simverbs up: $(cat "$tmp/up.txt")"
ns0="sv-$SIMVERBS_FABRIC-node0"
# IPoIB on mlx5_0 of each host: ib0 is on rail 0's bridge.
ip -n "$ns0" addr add 198.19.0.1/24 dev ib0
ip -n "sv-$SIMVERBS_FABRIC-node1" addr add 198.19.0.2/24 dev ib0
sw="sv-$SIMVERBS_FABRIC-sw"
addr=$("$SIMVERBS" host-addr node0)
ns_prefix=(ip netns exec "$ns0")
perf_opts=(--rendezvous-addr "$addr" --gap-log "$tmp/gaps")
export NCCL_DEBUG=INFO
case $case_ in
default) unset NCCL_SOCKET_IFNAME ;;
pinned) export NCCL_SOCKET_IFNAME=ib0 ;;
cut_host | cut_switch | cut_twice)
  unset NCCL_SOCKET_IFNAME
  # ib0 is the cable pulled: IPoIB on mlx5_3 carries the second connections.
  ip -n "$ns0" addr del 198.19.0.1/24 dev ib0
  ip -n "sv-$SIMVERBS_FABRIC-node1" addr del 198.19.0.2/24 dev ib0
  ip -n "$ns0" addr add 198.19.3.1/24 dev ib3
  ip -n "sv-$SIMVERBS_FABRIC-node1" addr add 198.19.3.2/24 dev ib3
  on_exit+=("ip -n $ns0 link set mgmt0 up 2>/dev/null" "ip -n $sw link set h0m up 2>/dev/null"
    "ip -n $ns0 link set ib3 up 2>/dev/null")
  # The driver's own rendezvous (a gather every iteration) must not cross
  # the cut: no plugin can help a job whose launcher is cut off.
  perf_opts=(--rendezvous-addr 198.19.3.1 --gap-log "$tmp/gaps")
  if [ "$case_" = cut_twice ]; then
    # ib3 is cut too: the rendezvous gets a link of its own, named docker0,
    # which the control channel takes last and never as its second.
    ns1="sv-$SIMVERBS_FABRIC-node1"
    ip link add lprv0 netns "$ns0" type veth peer name lprv1 netns "$ns1"
    ip -n "$ns0" link set lprv0 name docker0
    ip -n "$ns1" link set lprv1 name docker0
    ip -n "$ns0" addr add 198.19.9.1/24 dev docker0
    ip -n "$ns1" addr add 198.19.9.2/24 dev docker0
    ip -n "$ns0" link set docker0 up
    ip -n "$ns1" link set docker0 up
    perf_opts=(--rendezvous-addr 198.19.9.1 --gap-log "$tmp/gaps")
  fi
  ;;
join_lost)
  unset NCCL_SOCKET_IFNAME
  ip -n "$ns0" addr del 198.19.0.1/24 dev ib0
  ip -n "sv-$SIMVERBS_FABRIC-node1" addr del 198.19.0.2/24 dev ib0
  ip -n "$ns0" addr add 198.19.3.1/24 dev ib3
  ip -n "sv-$SIMVERBS_FABRIC-node1" addr add 198.19.3.2/24 dev ib3
  # Each host's frames to the other's ib3 address go to a MAC nobody has:
  # a connect there draws no answer at all, as behind a dead switch port.
  ip -n "$ns0" neigh replace 198.19.3.2 lladdr 02:00:00:00:0f:02 dev ib3 nud permanent
  ip -n "sv-$SIMVERBS_FABRIC-node1" neigh replace 198.19.3.1 lladdr 02:00:00:00:0f:01 dev ib3 nud permanent
  export LINKPASS_SETUP_TIMEOUT_MS=600
  run_perf 1M 3
  expect_clean_run
  n=$(count_lines 'control channel: a second connection per connection over ib3 ' "$tmp/out")
  ((n == 2)) || fail "expected both ranks to try second control connections over ib3, $n do"
  n=$(count_lines 'no second control connection to 198\.19\.3\.' "$tmp/out")
  ((n >= 2)) || fail "expected connections that went on without their second control connection, found $n"
  ! grep -q 'within LINKPASS_SETUP_TIMEOUT_MS' "$tmp/out" || fail "a connection failed for its second control connection"
  echo "PASS control_channel $case_ ($n connections went on with one control connection)"
  exit 0
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac

# node0's TCP connections over mgmt0 that are up: control connections (the
# rendezvous goes elsewhere in the cut cases).  One given up for a timeout
# is closed, though its fd stays open (ctlchan.h).
mgmt_established() { ip netns exec "$ns0" ss -Htn state established src "$addr" | wc -l; }
mgmt_back() { (($(mgmt_established) >= $1)); }

if [ "${case_#cut_}" != "$case_" ]; then
  cut=$([ "$case_" = cut_host ] && echo $((pull + 1)) || echo 14)
  rest=$([ "$case_" = cut_twice ] && echo 30 || echo 8) # cut_twice: the connections made again, the second pull
  run_perf 1M $((cut + rest))
  n=$(count_lines 'control channel: a second connection per connection over ib3 ' "$tmp/out")
  ((n == 2)) || fail "expected both ranks to make second control connections over ib3, $n do"
  n=$(count_lines ', 2 control connection\(s\)' "$tmp/out")
  ((n >= 2)) || fail "expected connections with 2 control connections, found $n"
  : >"$tmp/gaps"
  mgmt_before=$(mgmt_established)
  ((mgmt_before >= 2)) || fail "expected control connections over mgmt0 ($addr), ss shows $mgmt_before"
  if [ "$case_" = cut_host ]; then
    ip -n "$ns0" link set mgmt0 down
  else
    ip -n "$sw" link set h0m down
  fi
  t0=$SECONDS
  ip -n "$ns0" link set ib0 down
  sleep "$pull" # the outage itself
  ip -n "$ns0" link set ib0 up
  sleep $((cut - pull)) # the rest of the cut
  ip -n "$ns0" link set mgmt0 up
  ip -n "$sw" link set h0m up
  if [ "$case_" = cut_twice ]; then
    # Each end gave its first connections up (below); each makes them
    # again 1-4 s after the cut (its attempts back off from 1 s, an attempt
    # that timed out waits 4 s).  Not counted from the log: an end tells
    # of a connection it gave up itself, not always of one its peer gave up
    # first, and both tell of one made again; so counted lines matched
    # while a connection was not made yet, and its move waited on ib3.
    given=$(count_lines 'control connection to .* failed: .*go on over 198\.19\.3\.' "$tmp/out")
    ((given > 0)) || fail "no control connection over the cut management network was given up"
    wait_until 20 "as many control connections over mgmt0 as before the cut ($mgmt_before)" mgmt_back "$mgmt_before"
    echo "$mgmt_before control connections over mgmt0 up again $((SECONDS - t0 - cut)) s after the cut;" \
      "$(count_lines 'made again \(2 of 2' "$tmp/out") ends tell of one made again, $given of one given up"
    : >"$tmp/gaps"
    ip -n "$ns0" link set ib3 down # the second connections' interface, and mlx5_3
    ip -n "$ns0" link set ib0 down
    sleep "$pull" # the second outage
    ip -n "$ns0" link set ib0 up
    ip -n "$ns0" link set ib3 up
  fi
  expect_clean_run
  grep -q 'event=failover .* dev=mlx5_0 ' "$tmp/syslog" || fail "no connection moved off mlx5_0"
  grep -q 'event=failback ' "$tmp/syslog" || fail "no connection came back to mlx5_0"
  given_up=$(count_lines 'control connection to .* failed: .*go on over 198\.19\.3\.' "$tmp/out")
  if [ "$case_" != cut_host ]; then
    ((given_up > 0)) || fail "no control connection over the cut management network was given up"
  else
    ((given_up == 0)) || fail "$given_up control connections given up during a cut shorter than TCP's timeout"
  fi
  longest=$(awk '{ d = $3 - $2; if (d > m) m = d } END { printf "%.3f", m + 0 }' "$tmp/gaps")
  echo "longest pause of a rank with the control network cut and mlx5_0 pulled: ${longest} s ($case_;" \
    "$given_up control connections given up)"
  awk -v m="$longest" 'BEGIN { exit !(m < 1.0) }' || fail "a rank paused ${longest} s: the move waited for the control channel"
  echo "PASS control_channel $case_"
  exit 0
fi

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
