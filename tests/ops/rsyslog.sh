#!/usr/bin/env bash
# The event lines as an operator's syslog daemon receives them.  The test
# starts Debian's rsyslogd itself, with a configuration of its own (no
# system configuration, no kernel log): imuxsock listens on a private socket
# (LINKPASS_SYSLOG_SOCKET) and an omfile action writes what comes from
# "linkpass" to a file.  One cable pull and reinsert under the checked
# all_reduce must produce exactly one failover line per connection end that
# moved and one failback line per connection end, with every key=value
# field, facility local3 and the right severities.
# usage: rsyslog.sh     (env: SIMVERBS PERF PLUGIN CONFS)
source "$(dirname "$0")/lib.sh"

rsyslogd=$(command -v rsyslogd || true)
[ -n "$rsyslogd" ] || [ ! -x /usr/sbin/rsyslogd ] || rsyslogd=/usr/sbin/rsyslogd
[ -n "$rsyslogd" ] || fail "rsyslogd is not installed: install Debian's rsyslog package (scripts/setup.sh does)"

mkdir "$tmp/rsyslog"
cat >"$tmp/rsyslog.conf" <<EOF
global(workDirectory="$tmp/rsyslog")
module(load="imuxsock" SysSock.Use="off")
input(type="imuxsock" Socket="$tmp/log.sock" RateLimit.Interval="0")
template(name="linkpass" type="string"
         string="%syslogfacility-text%.%syslogseverity-text% %programname%[%procid%]:%msg%\\n")
if \$programname == "linkpass" then {
  action(type="omfile" file="$tmp/rsyslog.out" template="linkpass")
}
EOF
"$rsyslogd" -N1 -f "$tmp/rsyslog.conf" >"$tmp/rsyslog.check" 2>&1 ||
  fail "rsyslogd rejects the test configuration: $(cat "$tmp/rsyslog.check")"
"$rsyslogd" -n -f "$tmp/rsyslog.conf" -i "$tmp/rsyslog.pid" >"$tmp/rsyslog.log" 2>&1 &
rsyslog_pid=$!
pids+=("$rsyslog_pid")
# Stopped and reaped first on exit, before the temp directory goes.
on_exit+=('kill "$rsyslog_pid" 2>/dev/null; wait "$rsyslog_pid" 2>/dev/null')
rsyslog_up() {
  kill -0 "$rsyslog_pid" 2>/dev/null || fail "rsyslogd exited: $(cat "$tmp/rsyslog.log")"
  [ -S "$tmp/log.sock" ]
}
wait_until 10 "rsyslogd listens on $tmp/log.sock" rsyslog_up
export LINKPASS_SYSLOG_SOCKET="$tmp/log.sock" LINKPASS_SYSLOG_FACILITY=local3
export LINKPASS_METRICS_FILE="$tmp/linkpass-%p.prom" # tells how many connection ends use mlx5_0

sv up "$CONFS/two-hosts-4nic.conf"
run_perf 1M 8
files_are() { [ "$(find "$tmp" -maxdepth 1 -name '*.prom' | wc -l)" -eq 2 ]; }
wait_until 10 "both ranks write a metrics file" files_are
ends=$(metric_sum linkpass_connections mlx5_0)
((ends > 0)) || fail "no connection uses mlx5_0"

pulled=$EPOCHREALTIME
sv link node0:mlx5_0 down
wait_until 20 "$ends failover lines in rsyslog's file" at_least "event=failover" "$tmp/rsyslog.out" "$ends"
plugged=$EPOCHREALTIME
sv link node0:mlx5_0 up
wait_until 30 "$ends failback lines in rsyslog's file" at_least "event=failback" "$tmp/rsyslog.out" "$ends"
expect_clean_run
kill -0 "$rsyslog_pid" 2>/dev/null || fail "rsyslogd died during the run: $(cat "$tmp/rsyslog.log")"

# Exactly those lines, nothing else, every field in order.
out=$tmp/rsyslog.out
fields='event=[a-z_]+ comm=0x[0-9a-f]+ dir=(send|recv) dev=[^ =]+ port=[0-9]+ new_dev=[^ =]+ new_port=[0-9]+ peer=[^ ]+ reason=[a-z_]+ inflight=[0-9]+ replayed=[0-9]+ replayed_bytes=[0-9]+ duration_us=[0-9]+ path=(standby|revived|new) time=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z'
n=$(wc -l <"$out")
((n == 2 * ends)) || fail "$n lines from linkpass, expected $ends failover and $ends failback lines"
bad=$(grep -vE "^local3\.(warning|notice) linkpass\[[0-9]+\]: $fields\$" "$out" || true)
[ -z "$bad" ] || fail "malformed lines: $bad"
fo=$(grep -c "^local3\.warning linkpass\[[0-9]*\]: event=failover .* dev=mlx5_0 port=1 new_dev=mlx5_[123] new_port=1 " "$out" || true)
((fo == ends)) || fail "$fo failover lines at warning leaving mlx5_0:1 for another NIC, expected $ends"
fb=$(grep -c "^local3\.notice linkpass\[[0-9]*\]: event=failback .* dev=mlx5_[123] port=1 new_dev=mlx5_0 new_port=1 .* reason=failback " "$out" || true)
((fb == ends)) || fail "$fb failback lines at notice returning to mlx5_0:1, expected $ends"
# One failover and one failback per connection end: (pid, comm, dir) each once.
for event in failover failback; do
  dup=$(sed -n "s/^[^ ]* linkpass\[\([0-9]*\)\]: event=$event comm=\([^ ]*\) dir=\([a-z]*\) .*/\1 \2 \3/p" "$out" | sort | uniq -d)
  [ -z "$dup" ] || fail "a connection end has two $event lines: $dup"
done
ends_of() { sed -n "s/^[^ ]* linkpass\[\([0-9]*\)\]: event=$1 comm=\([^ ]*\) dir=\([a-z]*\) .*/\1 \2 \3/p" "$out" | sort; }
[ "$(ends_of failover)" = "$(ends_of failback)" ] || fail "the connection ends that failed back are not those that failed over"
# Both ends of every connection moved: each comm id is there once as send and once as recv.
pairs=$(ends_of failover | awk '{ print $2, $3 }' | sort | awk '{ n[$1]++; d[$1] = d[$1] $2 } END { for (c in n) if (n[c] != 2) print c }')
[ -z "$pairs" ] || fail "connections with only one end moved: $pairs"
# time= is the wall clock when traffic flowed again: each failover's
# between the pull and the plug-in, each failback's after the plug-in.
times_of() { sed -n "s/.* event=$1 .* time=\([^ ]*\)\$/\1/p" "$out"; }
# Each time= of kind $1 (as seconds) not within [$2, $3].
outside() { times_of "$1" | while read -r t; do awk -v s="$(date -u -d "$t" +%s.%N)" -v a="$2" -v b="$3" -v t="$t" 'BEGIN { if (s < a || s > b) print t }'; done; }
late=$(outside failover "$pulled" "$plugged")
[ -z "$late" ] || fail "failover lines whose time= is not between the pull ($pulled) and the plug-in ($plugged): $late"
late=$(outside failback "$plugged" "$EPOCHREALTIME")
[ -z "$late" ] || fail "failback lines whose time= is not after the plug-in ($plugged): $late"
echo "PASS rsyslog: $fo failover and $fb failback lines through rsyslogd"
cat "$out"
