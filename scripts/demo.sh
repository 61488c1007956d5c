#!/usr/bin/env bash
# The cable-pull demo: build everything, bring up a simulated 2-host x 4-NIC
# RDMA cluster in network namespaces, run a checked all_reduce through the
# linkpass plugin while cables are pulled and plugged back in with
# `ip link set`, then show what operators would see: busbw and #wrong per
# second, the plugin's syslog lines, and a summary.  Everything it starts
# is torn down when it ends, also on Ctrl-C.  Run as root (namespaces).
#
# usage: bash scripts/demo.sh [options]      (bash scripts/demo.sh --help)
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bash scripts/demo.sh [options]

Builds linkpass, brings up a simulated cluster whose hosts live in network
namespaces (one veth per NIC port, a bridge per rail as the leaf switch, a
management network for out-of-band TCP), runs the nccl-tests-style all_reduce
(bench/linkpass-perf --duration) through the plugin and pulls cables on a
timer with `ip netns exec sv-<fabric>-<host> ip link set <if> down|up`.
Needs root (network namespaces) and Debian 12 (missing packages are installed).

  --duration SEC     how long the all_reduce runs                      [30]
  --ranks N          rank processes, spread over the hosts in blocks   [4]
  --size SIZE        all_reduce size per iteration (8, 1K, 16M, 1G)    [16M]
  --flap-every SEC   pull a cable every SEC seconds, alternating hosts
                     and NICs (the NICs the ranks start on)           [6]
  --down-for SEC     how long each cable stays out                     [3]
  --config FILE      topology (tests/simverbs/configs/*.conf); run in
                     namespaces even if it does not say `netns on`
                     [tests/simverbs/configs/two-hosts-4nic-netns.conf]
  --scenario FILE    a scenario file: the same settings, one per line, and
                     optionally an explicit schedule that replaces the timer:
                         duration 20
                         at 3.0 down node0 ib1     # pull node0's cable ib1
                         at 6.5 up node0 ib1       # plug it back in
                     (see scripts/demo.scenario).  Flags given after it win.
  --fabric NAME      fabric name: namespaces are sv-NAME-<host>        [demo]
  -h, --help         this text

The plugin's own settings come from the environment as usual, e.g.
LINKPASS_FAILBACK_HOLDDOWN_MS (default 2000) or LINKPASS_WATCHDOG_MS.
Exit status: 0 every element right; 1 wrong data or a failed run; 2 usage.
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

# ---------------------------------------------------------------- settings
duration=30 ranks=4 size=16M flap_every=6 down_for=3 fabric=demo
config="$top/tests/simverbs/configs/two-hosts-4nic-netns.conf"
schedule=() # "AT down|up HOST IF", from a scenario file

die_usage() {
  echo "demo: $*" >&2
  echo "run 'bash scripts/demo.sh --help' for the options" >&2
  exit 2
}
is_seconds() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
is_count() { [[ $1 =~ ^[0-9]+$ ]] && (($1 >= 1)); }

# One setting by name, from a flag or a scenario line (where = for messages).
set_opt() {
  local key=$1 val=$2 where=$3 base=${4:-$PWD}
  case $key in
  duration | flap-every | down-for)
    is_seconds "$val" || die_usage "$where: $key wants seconds, got '$val'" ;;&
  duration) duration=$val ;;
  flap-every) flap_every=$val ;;
  down-for) down_for=$val ;;
  ranks)
    is_count "$val" && ((val >= 2 && val <= 64)) || die_usage "$where: ranks wants 2..64, got '$val'"
    ranks=$val
    ;;
  size)
    [[ $val =~ ^[0-9]+[KMG]?$ ]] || die_usage "$where: size wants 8, 1K, 16M, 1G ..., got '$val'"
    size=$val
    ;;
  config)
    [[ $val = /* ]] || val="$base/$val"
    [ -f "$val" ] || die_usage "$where: no topology file $val"
    config=$val
    ;;
  fabric)
    [[ $val =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,20}$ ]] || die_usage "$where: fabric wants a short name, got '$val'"
    fabric=$val
    ;;
  *) die_usage "$where: unknown setting '$key'" ;;
  esac
}

read_scenario() {
  local file=$1 n=0 line key rest
  [ -f "$file" ] || die_usage "no scenario file $file"
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%%#*}
    read -r key rest <<<"$line" || true
    [ -n "${key:-}" ] || continue
    if [ "$key" = at ]; then
      local at what host ifname extra
      read -r at what host ifname extra <<<"$rest" || true
      is_seconds "${at:-}" && [[ ${what:-} =~ ^(down|up)$ ]] && [ -n "${ifname:-}" ] && [ -z "${extra:-}" ] ||
        die_usage "$file:$n: expected 'at SECONDS down|up HOST INTERFACE', got '$line'"
      schedule+=("$at $what $host $ifname")
    else
      # a topology path in a scenario file is relative to the repository root
      set_opt "$key" "$rest" "$file:$n" "$top"
    fi
  done <"$file"
}

while (($#)); do
  case $1 in
  -h | --help)
    usage
    exit 0
    ;;
  --scenario) read_scenario "${2:?--scenario needs a file}" && shift 2 ;;
  --scenario=*) read_scenario "${1#*=}" && shift ;;
  --duration | --ranks | --size | --flap-every | --down-for | --config | --fabric)
    (($# >= 2)) || die_usage "$1 needs a value"
    set_opt "${1#--}" "$2" "$1"
    shift 2
    ;;
  --*=*)
    set_opt "$(sed 's/^--//; s/=.*//' <<<"$1")" "${1#*=}" "${1%%=*}"
    shift
    ;;
  *) die_usage "unknown argument '$1'" ;;
  esac
done
awk -v d="$duration" 'BEGIN { exit !(d >= 5) }' || die_usage "--duration must be at least 5 s"
awk -v e="$flap_every" -v f="$down_for" 'BEGIN { exit !(e > 0 && f > 0) }' ||
  die_usage "--flap-every and --down-for must be positive"
if [ "$(id -u)" != 0 ]; then
  echo "demo: run me as root: the simulated hosts live in network namespaces (sudo bash scripts/demo.sh)" >&2
  exit 1
fi

# ---------------------------------------------------------------- teardown
tmp="" sink_pid="" flapper_pid="" perf_pid="" tail_pid="" fabric_up=0 sv=""
cleanup() {
  local rc=$? p
  trap - INT TERM EXIT
  set +e
  [ -n "$flapper_pid" ] && kill "$flapper_pid" 2>/dev/null
  if [ -n "$perf_pid" ] && kill -0 "$perf_pid" 2>/dev/null; then
    kill -TERM "$perf_pid" 2>/dev/null # the launcher stops its ranks (3 s grace)
    for _ in $(seq 50); do kill -0 "$perf_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$perf_pid" 2>/dev/null
  fi
  [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
  if ((fabric_up)); then
    # ranks still alive (their launcher was killed hard) would keep the
    # hosts' namespaces: they are ours, found by their fabric argument
    for p in $(pgrep -f -- "linkpass-perf --fabric $fabric " 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
    "$sv" down --fabric "$fabric" >/dev/null 2>&1 || echo "demo: 'simverbs down --fabric $fabric' failed" >&2
  fi
  [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null
  wait 2>/dev/null
  [ -n "$tmp" ] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted: tearing down"; exit 130' INT
trap 'echo "demo: terminated: tearing down"; exit 143' TERM
tmp=$(mktemp -d /tmp/linkpass-demo.XXXXXX)
chmod 755 "$tmp" # the ranks write into it from inside the hosts

# ------------------------------------------------------------------- build
bash "$here/setup.sh"
echo "== building linkpass (cmake; a minute or two the first time; log: $tmp/build.log)"
dir=$(bash "$here/build.sh" 2>"$tmp/build.log") || {
  tail -n 40 "$tmp/build.log" >&2
  echo "demo: the build failed (above)" >&2
  exit 1
}
sv="$dir/simverbs/simverbs" perf="$dir/bench/linkpass-perf" sink="$dir/tests/failover/syslog_sink"
plugin="$dir/lib/libnccl-net-linkpass.so"
for f in "$sv" "$perf" "$sink" "$plugin"; do
  [ -e "$f" ] || { echo "demo: the build did not produce $f" >&2; exit 1; }
done

# ------------------------------------------------------------------ fabric
export SIMVERBS_FABRIC=$fabric
if "$sv" status --fabric "$fabric" >/dev/null 2>&1; then
  echo "demo: a fabric named '$fabric' is already up (another demo?). Take it down with" >&2
  echo "  $sv down --fabric $fabric      or pick another name with --fabric" >&2
  exit 1
fi
echo "== bringing up the cluster: $(basename "$config") in network namespaces (fabric '$fabric')"
fabric_up=1
"$sv" up "$config" --netns --fabric "$fabric" >"$tmp/up.log" 2>&1 || {
  cat "$tmp/up.log" >&2
  exit 1
}

# "host nic port interface" for every port: the hosts from the fabric's
# status, each port's interface from its namespace (aliased NIC:PORT)
mapfile -t hosts < <("$sv" status --fabric "$fabric" | awk '$1 == "host" && $3 ~ /^sv-/ { print $2 }')
for h in "${hosts[@]}"; do
  ip -n "sv-$fabric-$h" -o link show | sed -n 's/^[0-9]*: \([^:@]*\)[@:].*\\ *alias \(.*\)$/\1 \2/p' |
    awk -v h="$h" '{ split($2, a, ":"); print h, a[1], a[2], $1 }' | sort -k2,2 -k3,3n
done >"$tmp/ports"
((${#hosts[@]} >= 2)) || { echo "demo: $config has fewer than two hosts" >&2; exit 1; }
((ranks >= ${#hosts[@]})) || die_usage "--ranks $ranks is fewer than the ${#hosts[@]} hosts"
rdv_ip=$("$sv" host-addr "${hosts[0]}")
for h in "${hosts[@]}"; do
  printf '   %-8s namespace sv-%s-%s  mgmt0 %-14s NICs:' "$h" "$fabric" "$h" "$("$sv" host-addr "$h")"
  awk -v h="$h" '$1 == h { printf " %s=%s", $4, $2 }' "$tmp/ports"
  echo
done
ifname_of() { awk -v h="$1" -v i="$2" '$1 == h { if (n++ == i) print $4 }' "$tmp/ports"; }
nic_of() { awk -v h="$1" -v f="$2" '$1 == h && $4 == f { print $2 ":" $3 }' "$tmp/ports"; }

# ---------------------------------------------------------------- schedule
# With no explicit schedule: one cable out every --flap-every seconds for
# --down-for seconds, hosts in turn, cycling over the NICs the ranks start
# on (rank r of a host starts on NIC r), never two of a host at once.
if ((${#schedule[@]} == 0)); then
  per_host=$(((ranks + ${#hosts[@]} - 1) / ${#hosts[@]}))
  nports=$(awk -v h="${hosts[0]}" '$1 == h' "$tmp/ports" | wc -l)
  used=$((per_host < nports ? per_host : nports))
  mapfile -t schedule < <(
    awk -v dur="$duration" -v every="$flap_every" -v down="$down_for" -v nh="${#hosts[@]}" -v used="$used" \
      -v hosts="${hosts[*]}" 'BEGIN {
        split(hosts, H, " ")
        for (k = 0; ; k++) {
          at = 3 + k * every
          if (at + down > dur - 1) break
          h = H[k % nh + 1]; nic = (1 + k + int(k / nh)) % used
          printf "%.3f down %s #%d\n%.3f up %s #%d\n", at, h, nic, at + down, h, nic
        }
      }' | sort -n -k1,1
  )
  for i in "${!schedule[@]}"; do
    read -r at what h idx <<<"${schedule[$i]}"
    schedule[i]="$at $what $h $(ifname_of "$h" "${idx#\#}")"
  done
fi
for ev in "${schedule[@]}"; do
  read -r at what h ifname <<<"$ev"
  [ -n "$(nic_of "$h" "$ifname")" ] || die_usage "schedule '$ev': host $h has no port interface '$ifname' (see the NICs above)"
done

# ------------------------------------------------------------- the run
"$sink" "$tmp/log.sock" "$tmp/syslog" --stamp &
sink_pid=$!
for _ in $(seq 200); do [ -S "$tmp/log.sock" ] && break; sleep 0.01; done
[ -S "$tmp/log.sock" ] || { echo "demo: the syslog receiver did not start" >&2; exit 1; }

# The injector: waits for the driver's first table line, so that "at 3"
# means 3 s into the per-second table, then pulls and plugs in the cables.
flapper() {
  local t0 ev at what h ifname now wait_s
  for _ in $(seq 1200); do grep -q '^# --duration' "$tmp/out" 2>/dev/null && break; sleep 0.05; done
  t0=$EPOCHREALTIME
  for ev in "${schedule[@]}"; do
    read -r at what h ifname <<<"$ev"
    now=$EPOCHREALTIME
    wait_s=$(awk -v a="$at" -v t0="$t0" -v n="$now" 'BEGIN { w = t0 + a - n; printf "%.3f", (w > 0 ? w : 0) }')
    sleep "$wait_s"
    local t_inj=$EPOCHREALTIME # before the action: its first lines may arrive before `ip` returns
    ip netns exec "sv-$fabric-$h" ip link set "$ifname" "$what" ||
      echo "demo: could not set $h's $ifname $what" >&2
    printf '   %5.1f s  >> %s %s %s (%s)    ip netns exec sv-%s-%s ip link set %s %s\n' \
      "$at" "$([ "$what" = down ] && echo "pulled   " || echo "plugged in")" "$h" "$ifname" \
      "$(nic_of "$h" "$ifname")" "$fabric" "$h" "$ifname" "$what"
    echo "$at $what $h $ifname $t_inj" >>"$tmp/injected"
  done
}
# The yardstick: the same all_reduce for a few seconds with every cable in.
hostlist=$(IFS=,; echo "${hosts[*]}")
run_perf() { # DURATION OUTPUT: the driver through the plugin, in the first host
  NCCL_SOCKET_IFNAME=mgmt0 LINKPASS_SYSLOG_SOCKET="$tmp/log.sock" NCCL_DEBUG=${NCCL_DEBUG:-WARN} \
    "$sv" run --host "${hosts[0]}" --fabric "$fabric" -- "$perf" --fabric "$fabric" --hosts "$hostlist" \
    -N "$ranks" --plugin "$plugin" --rendezvous-addr "$rdv_ip" --op all_reduce -e "$size" \
    --duration "$1" --timeout "$(awk -v d="$1" 'BEGIN { print int(d) + 60 }')" --stall-timeout 20 \
    >"$2" 2>>"$tmp/driver.log"
}
baseline_s=4
echo "== a healthy baseline first: the same all_reduce for $baseline_s s with every cable in"
baseline="n/a"
if run_perf "$baseline_s" "$tmp/baseline.out"; then
  baseline=$(sed -n 's/^# Avg bus bandwidth *: //p' "$tmp/baseline.out" | head -1)
  echo "   busbw ${baseline:-?} GB/s"
else
  echo "   (the baseline run failed: see the driver's log at the end)"
fi
: >"$tmp/out"
: >"$tmp/injected"
flapper &
flapper_pid=$!

npulls=$(printf '%s\n' "${schedule[@]}" | grep -c ' down ' || true)
echo "== all_reduce of $size on $ranks ranks (${hosts[*]}) for $duration s, $npulls cable pulls on the way"
echo "   a line per second: iterations, algbw and busbw in GB/s, wrong elements; cable actions as they happen"
# The launcher runs in the first host: the ranks reach its rendezvous, and
# each other, over the management network (127.0.0.1 is host-local here).
run_perf "$duration" "$tmp/out" &
perf_pid=$!
tail -n +1 -f --pid="$perf_pid" "$tmp/out" &
tail_pid=$!
rc=0
wait "$perf_pid" || rc=$?
perf_pid=""
wait "$tail_pid" || true
tail_pid=""
kill "$flapper_pid" 2>/dev/null || true
wait "$flapper_pid" 2>/dev/null || true
flapper_pid=""
sleep 0.3 # the last datagrams

# ------------------------------------------------------------------ report
echo
echo "== syslog: the plugin's lines, grouped by the cable action they follow ([host rank] from the driver's rank table; comm= and peer= left out)"
# Every line carries its arrival time (the receiver's --stamp); each goes
# under the latest cable action injected before it arrived.
awk 'FILENAME == ARGV[1] { if ($1 == "#" && $2 == "rank") { host[$5] = $7; rank[$5] = $3 } next }
     FILENAME == ARGV[2] { n++; at[n] = $5; what[n] = $2; h[n] = $3; ifn[n] = $4; t[n] = $1; next }
     /linkpass\[[0-9]+\]: event=/ {
       stamp = substr($1, 2) + 0
       line = $0; sub(/^@[0-9.]+ /, "", line); sub(/^<[0-9]+>/, "", line)
       pid = line; sub(/^.*linkpass\[/, "", pid); sub(/\].*$/, "", pid)
       g = 0
       for (i = 1; i <= n; i++) if (at[i] <= stamp) g = i
       out[g] = out[g] sprintf("      [%s r%s] %s\n", (pid in host ? host[pid] : "?"), (pid in rank ? rank[pid] : "?"), line)
       cnt[g]++
     }
     END {
       for (g = 0; g <= n; g++) {
         if (g == 0 && cnt[0] == 0) continue
         if (g == 0) print "   before the first cable action:"
         else printf "   %5.1f s  %s %s %s: %d line%s\n", t[g], (what[g] == "down" ? "pulled" : "plugged in"), h[g], ifn[g], cnt[g], (cnt[g] == 1 ? "" : "s")
         printf "%s", out[g]
       }
     }' "$tmp/out" "$tmp/injected" "$tmp/syslog" | sed 's/ comm=0x[0-9a-f]*//; s/ peer=[^ ]*//' >"$tmp/grouped"
grep -h 'linkpass\[[0-9]*\]: event=' "$tmp/syslog" | sed 's/^@[0-9.]* //' >"$tmp/events" || true
if [ -s "$tmp/events" ]; then cat "$tmp/grouped"; else echo "   (none)"; fi

count() { grep -c -- "$1" "$tmp/events" || true; }
field() { # a line of the driver's footer, or why there is none
  local v
  v=$(sed -n "s/^# $1 *: //p" "$tmp/out" | head -1)
  echo "${v:-n/a (the run did not finish)}"
}
failovers=$(count 'event=failover') failbacks=$(count 'event=failback') lost=$(count 'event=path_lost')
pulls=$(grep -c ' down ' "$tmp/injected" || true) plugs=$(grep -c ' up ' "$tmp/injected" || true)
wrong=$(field 'Wrong elements')
durations=$(grep -o 'event=failover.*duration_us=[0-9]*' "$tmp/events" | sed 's/.*duration_us=//' | sort -n || true)
echo
echo "== summary"
printf '   %-22s %s\n' "cables pulled" "$pulls (plugged back: $plugs)" \
  "failovers" "$failovers connection ends moved to another NIC$(grep -o 'event=failover .*reason=[a-z_]*' "$tmp/events" |
    sed 's/.*reason=//' | sort | uniq -c | awk '{ printf "%s %s=%s", (NR == 1 ? " (reason" : ","), $2, $1 } END { if (NR) printf ")" }')" \
  "failbacks" "$failbacks moved back after the hold-down" \
  "paths lost" "$lost"
if [ -n "$durations" ]; then
  printf '   %-22s %s\n' "failover time" "$(awk '{ v[NR] = $1 } END {
    printf "median %.1f ms, worst %.1f ms (fault seen -> traffic flowing)", v[int((NR + 1) / 2)] / 1e3, v[NR] / 1e3 }' <<<"$durations")"
fi
printf '   %-22s %s\n' "worst stall" "$(field 'Slowest iteration') (the slowest all_reduce iteration)" \
  "busbw" "$(field 'Avg bus bandwidth') GB/s on average through the pulls; lowest full second $(awk '$1 ~ /^[0-9.]+$/ && NF == 5 {
    if (prev != "" && (m == "" || prev < m)) m = prev; prev = $4 } END { print (m == "" ? "?" : m) }' "$tmp/out") GB/s" \
  "healthy baseline" "${baseline:-?} GB/s, the same all_reduce with every cable in ($(awk -v a="$(field 'Avg bus bandwidth')" -v b="$baseline" \
    'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "through the pulls: %.0f%% of it", 100 * a / b; else printf "no ratio" }'))" \
  "what limits GB/s here" "this machine's $(nproc) CPU cores: the simulated NICs copy every byte with memcpy, shared by $ranks ranks (docs/PERFORMANCE.md)" \
  "data errors" "$wrong"
if ((rc == 0)) && [ "$wrong" = "0 OK" ]; then
  echo "== PASS: every element of every iteration was right through $pulls cable pulls"
else
  echo "== FAIL: the driver exited with status $rc; its log:" >&2
  tail -n 30 "$tmp/driver.log" >&2
  exit 1
fi
