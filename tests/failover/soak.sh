#!/usr/bin/env bash
# The chaos soak: 4 ranks (2 per host) run the driver's checked ring
# all_reduce for SOAK_SECONDS while cables are pulled at random on both
# hosts: a random NIC, out for a random 0.1-2 s, a new pull every 0.2-1 s,
# never every NIC of a host at once.  It asserts:
#   - zero wrong elements (every iteration is checked) and a clean exit;
#   - no hang: the driver's own --timeout and --stall-timeout, and ctest's
#     TIMEOUT around the whole;
#   - no connection lost a path (one NIC of each host always stays up);
#   - syslog and NCCL's log carry exactly the same event lines, and every
#     failover blamed on a port going down names a NIC that was pulled;
#   - the metrics files (LINKPASS_METRICS_FILE) count the failovers and
#     failbacks the syslog lines report, rank by rank.
# The schedule comes from a seed printed first: SOAK_SEED=<seed> replays it
# (the faults; the timing of the ranks is the machine's).
#
# On a host where network namespaces work (root), the hosts live in them and
# cables are pulled with `ip netns exec sv-<fabric>-<host> ip link set <if>
# down`; elsewhere with `simverbs link HOST:NIC down` on a plain fabric.
#
# usage: soak.sh      (env: SIMVERBS PERF PLUGIN SINK CONFS; optional:
#                      SOAK_SECONDS [90], SOAK_SEED [20240229], SOAK_RANKS [4],
#                      MEM [host] (linkpass-perf --mem: host, cuda or dmabuf),
#                      SOAK_SIZE [4M], SOAK_NETNS [auto|0|1],
#                      SOAK_MAX_DOWN [3]: cables of one host out at once, 1..3)
# Longer runs (ctest's TIMEOUT of 400 s fits the default only), e.g. an hour:
#   SIMVERBS=build/simverbs/simverbs PERF=build/bench/linkpass-perf \
#     PLUGIN=build/lib/libnccl-net-linkpass.so SINK=build/tests/failover/syslog_sink \
#     CONFS=tests/simverbs/configs SOAK_SECONDS=3600 bash tests/failover/soak.sh
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
. "$(dirname "${BASH_SOURCE[0]}")/../lib/poll.sh"  # wait_until, has_line
export LC_ALL=C
: "${SIMVERBS:?}" "${PERF:?}" "${PLUGIN:?}" "${SINK:?}" "${CONFS:?}"
secs=${SOAK_SECONDS:-90} seed=${SOAK_SEED:-20240229} nranks=${SOAK_RANKS:-4} size=${SOAK_SIZE:-4M}
maxdown=${SOAK_MAX_DOWN:-3} # cables of one host out at once: at most all but one
[[ $secs =~ ^[0-9]+$ ]] && ((secs >= 10)) || { echo "SOAK_SECONDS must be a whole number >= 10" >&2; exit 2; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "SOAK_SEED must be a number" >&2; exit 2; }
[[ $maxdown =~ ^[1-3]$ ]] || { echo "SOAK_MAX_DOWN must be 1, 2 or 3 (of 4 NICs per host)" >&2; exit 2; }
echo "soak: seed $seed, $secs s, $nranks ranks, all_reduce of $size, up to $maxdown of a host's 4 cables out at once"
echo "soak: replay with SOAK_SEED=$seed SOAK_SECONDS=$secs SOAK_MAX_DOWN=$maxdown"

tmp=$(mktemp -d /tmp/lpsoak.XXXXXX)
# A rate board of its own: the host's default one is shared with every
# test ctest runs beside it, on fabrics whose NICs have the same GUIDs
# (tests/failover/scenario.sh).
export LINKPASS_RATE_BOARD="$tmp/rates"
chmod 755 "$tmp" # written by the ranks from inside the hosts
export SIMVERBS_FABRIC="soak$$"
pids=()
perf=""
cleanup() {
  local p
  [ -n "$perf" ] && kill "$perf" 2>/dev/null # the launcher stops its ranks
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$SIMVERBS" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL (soak, seed $seed): $*" >&2
  echo "--- driver output (last 40 lines)" >&2
  tail -n 40 "$tmp/out" >&2 2>/dev/null || true
  echo "--- driver log (last 40 lines)" >&2
  tail -n 40 "$tmp/log" >&2 2>/dev/null || true
  echo "--- injected (last 20)" >&2
  tail -n 20 "$tmp/injected" >&2 2>/dev/null || true
  echo "--- syslog (last 20)" >&2
  tail -n 20 "$tmp/syslog" >&2 2>/dev/null || true
  exit 1
}

# ---- the fabric: in namespaces when they work here
netns=${SOAK_NETNS:-auto}
if [ "$netns" = auto ]; then
  netns=0
  probe="lpsoak-probe-$$"
  if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add "$probe" 2>/dev/null; then
    ip -n "$probe" link add lpsoak-a type veth peer name lpsoak-b 2>/dev/null &&
      ip -n "$probe" link add lpsoak-br type bridge 2>/dev/null && netns=1
    ip netns delete "$probe"
  fi
fi
if [ "$netns" = 1 ]; then
  "$SIMVERBS" up "$CONFS/two-hosts-4nic-netns.conf" >/dev/null
  echo "soak: hosts in network namespaces sv-$SIMVERBS_FABRIC-*; cables pulled with ip link set"
else
  "$SIMVERBS" up "$CONFS/two-hosts-4nic.conf" >/dev/null
  echo "soak: plain fabric (no network namespaces here); cables pulled with simverbs link"
fi
# host nic port interface, for every port
"$SIMVERBS" status | awk '
  /^  host / { host = $2 }
  /^    [^ ]/ { nic = $1 }
  /^      port / { ifn = "-"; for (i = 1; i < NF; i++) if ($i == "if") ifn = $(i + 1); print host, nic, $2, ifn }' \
  >"$tmp/ports"
[ "$(wc -l <"$tmp/ports")" = 8 ] || fail "expected 2 hosts x 4 ports, got: $(cat "$tmp/ports")"

# ---- the schedule, from the seed: "at_ms down|up host nic"
awk -v seed="$seed" -v secs="$secs" -v maxdown="$maxdown" 'BEGIN {
  srand(seed)
  H[0] = "node0"; H[1] = "node1"
  for (h = 0; h < 2; h++) for (n = 0; n < 4; n++) back[h, n] = 0 # when the cable is back in (ms)
  t = 2000
  while (t < (secs - 3) * 1000) {
    h = int(rand() * 2)
    # the NICs of that host still in; never more than maxdown out
    k = 0
    for (n = 0; n < 4; n++) if (back[h, n] <= t) up[k++] = n
    if (k <= 4 - maxdown) { h = 1 - h; k = 0; for (n = 0; n < 4; n++) if (back[h, n] <= t) up[k++] = n }
    if (k > 4 - maxdown) {
      n = up[int(rand() * k)]
      d = 100 + int(rand() * 1900)
      back[h, n] = t + d
      printf "%d down %s mlx5_%d\n%d up %s mlx5_%d\n", t, H[h], n, t + d, H[h], n
    }
    t += 200 + int(rand() * 800)
  }
}' | sort -n -k1,1 -s >"$tmp/schedule"
echo "soak: $(grep -c ' down ' "$tmp/schedule") cable pulls scheduled (first: $(head -1 "$tmp/schedule"))"

# ---- syslog receiver, metrics files, short timers
"$SINK" "$tmp/log.sock" "$tmp/syslog" &
pids+=($!)
wait_until 5 "the syslog sink listens" test -S "$tmp/log.sock"
mkdir -m 777 "$tmp/metrics"
export LINKPASS_SYSLOG_SOCKET="$tmp/log.sock" LINKPASS_METRICS_FILE="$tmp/metrics/rank-%p.prom" \
  NCCL_IB_TIMEOUT=12 LINKPASS_WATCHDOG_MS=1000 LINKPASS_FAILBACK_HOLDDOWN_MS=500 \
  LINKPASS_FAILBACK_HOLDDOWN_MAX_MS=4000 NCCL_DEBUG=WARN
[ "$netns" = 1 ] && export NCCL_SOCKET_IFNAME=mgmt0 # 127.0.0.1 is host-local in a namespace

# ---- the run
launch=("$PERF")
if [ "$netns" = 1 ]; then
  # the launcher lives in node0; ranks reach it over the management network
  launch=("$SIMVERBS" run --host node0 -- "$PERF" --rendezvous-addr "$("$SIMVERBS" host-addr node0)")
fi
"${launch[@]}" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N "$nranks" --plugin "$PLUGIN" --op all_reduce \
  -e "$size" --duration "$secs" --timeout $((secs + 120)) --stall-timeout 60 --mem "${MEM:-host}" >"$tmp/out" \
  2>"$tmp/log" &
perf=$!

pull() { # down|up host nic
  local ifn
  if [ "$netns" = 1 ]; then
    ifn=$(awk -v h="$2" -v n="$3" '$1 == h && $2 == n { print $4 }' "$tmp/ports")
    ip netns exec "sv-$SIMVERBS_FABRIC-$2" ip link set "$ifn" "$1"
  else
    "$SIMVERBS" link "$2:$3" "$1" >/dev/null
  fi
}
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
wait_until 60 "the driver's timed loop" has_line '^# --duration' "$tmp/out"
t0=$(now_ms)
: >"$tmp/injected"
while read -r at what host nic; do
  kill -0 "$perf" 2>/dev/null || break
  wait_ms=$((t0 + at - $(now_ms)))
  ((wait_ms <= 0)) || sleep "$((wait_ms / 1000)).$(printf '%03d' $((wait_ms % 1000)))"
  pull "$what" "$host" "$nic" || fail "could not set $host:$nic $what"
  echo "$(($(now_ms) - t0)) $what $host $nic" >>"$tmp/injected"
done <"$tmp/schedule"
rc=0
wait "$perf" || rc=$?
perf=""
# The sink may still be writing the last datagrams: wait until syslog
# holds as many event lines as NCCL's log, 10 s at most (the comparison
# below then names what is missing).
settle=$((SECONDS + 10))
while (($(grep -c 'event=' "$tmp/syslog" || true) < $(grep -c 'event=' "$tmp/log" || true) && SECONDS < settle)); do
  sleep 0.05
done

# ---- the checks
((rc == 0)) || fail "the driver exited with $rc"
grep -q "Wrong elements *: 0 OK" "$tmp/out" || fail "wrong elements"
iters=$(sed -n 's/^# Iterations *: \([0-9]*\) .*/\1/p' "$tmp/out")
((${iters:-0} > 0)) || fail "no iteration completed"
pulls=$(grep -c ' down ' "$tmp/injected" || true)
((pulls == $(grep -c ' down ' "$tmp/schedule"))) || fail "only $pulls of the scheduled pulls were made"

ev() { grep -o 'event=.*' "$1" | sort || true; }
ev "$tmp/syslog" >"$tmp/ev.syslog"
ev "$tmp/log" >"$tmp/ev.nccl"
cmp -s "$tmp/ev.syslog" "$tmp/ev.nccl" ||
  fail "syslog and NCCL's log disagree: $(diff "$tmp/ev.syslog" "$tmp/ev.nccl" | head -10)"
failovers=$(grep -c '^event=failover ' "$tmp/ev.syslog" || true)
failbacks=$(grep -c '^event=failback ' "$tmp/ev.syslog" || true)
lost=$(grep -c '^event=path_lost ' "$tmp/ev.syslog" || true)
((lost == 0)) || fail "$lost connections lost their path although a NIC of each host was always up"
((failovers > 0)) || fail "$pulls cable pulls and not one failover"
((failbacks > 0)) || fail "$pulls cable pulls and not one failback"
# No packet was lost on purpose: the gray-failure detector must not move
# anything (pulls and flaps leave no resends in the counters).
! grep -q 'reason=degraded' "$tmp/ev.syslog" || fail "a move for reason degraded, and no port lost packets"

# A failover for port_down names a NIC of its own host that was pulled.
awk 'NR == FNR { if ($1 == "#" && $2 == "rank") host[$5] = $7; next }
     FILENAME ~ /injected$/ { if ($2 == "down") pulled[$3 " " $4] = 1; next }
     /event=failover/ && / reason=port_down / {
       pid = $0; sub(/^.*linkpass\[/, "", pid); sub(/\].*$/, "", pid)
       dev = $0; sub(/^.* dev=/, "", dev); sub(/ .*$/, "", dev)
       if (!((host[pid] " " dev) in pulled)) { print "pid " pid " (" host[pid] ") blamed " dev; bad++ }
     }
     END { exit bad > 0 }' "$tmp/out" "$tmp/injected" "$tmp/syslog" >"$tmp/blame" ||
  fail "port_down failovers on NICs that were never pulled: $(head -5 "$tmp/blame")"

# The metrics agree with syslog, rank by rank.
shopt -s nullglob
proms=("$tmp"/metrics/*.prom)
((${#proms[@]} == nranks)) || fail "${#proms[@]} metrics files under $tmp/metrics, not one for each of the $nranks ranks"
for f in "${proms[@]}"; do
  pid=$(sed -n 's/.*pid="\([0-9]*\)".*/\1/p' "$f" | head -1)
  for kind in failover failback; do
    m=$(awk -v k="linkpass_${kind}s_total" '$1 ~ "^" k "[{]" { s += $2 } END { print s + 0 }' "$f")
    s=$(grep -c "linkpass\[$pid\]: event=$kind " "$tmp/syslog" || true)
    ((m == s)) || fail "rank pid $pid: ${kind}s: metrics say $m, syslog has $s lines ($(basename "$f"))"
  done
done
echo "soak: metrics of ${#proms[@]} ranks agree with syslog"

slowest=$(sed -n 's/^# Slowest iteration *: //p' "$tmp/out")
echo "soak: $iters iterations, 0 wrong; $pulls cable pulls -> $failovers failovers, $failbacks failbacks," \
  "0 paths lost; slowest iteration $slowest"
echo "PASS soak (seed $seed)"
