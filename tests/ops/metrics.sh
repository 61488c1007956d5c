#!/usr/bin/env bash
# The metrics file against injected faults.  The checked all_reduce runs
# with LINKPASS_METRICS_FILE set while node0's mlx5_0 cable is pulled and
# reinserted three times (each time waiting for every connection end on it
# to fail over, then to fail back).  Meanwhile every metrics file is parsed
# again and again: it must never be seen half-written.  At the end each
# process's counters must match the event lines it sent to syslog:
# failovers per device = lines leaving it, failbacks = lines returning to
# it, replayed requests and bytes = the sums of the lines; flaps = pulls on
# node0 and 0 on node1; the path is up again; degraded time > 0.
# usage: metrics.sh     (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
pulls=3

start_sink
export LINKPASS_METRICS_FILE="$tmp/linkpass-%h-%p.prom"
sv up "$CONFS/two-hosts-4nic.conf"
run_perf 1M 12

# Every metrics file, read over and over: complete every time.
# A complete file: HELP/TYPE pairs of 18 families, 10 x 4 device samples and
# 8 process samples, nothing else, ending with the last family.
cat >"$tmp/valid.awk" <<'EOF'
/^# HELP linkpass_[a-z_]+ [^ ].*$/ { next }
/^# TYPE linkpass_[a-z_]+ (counter|gauge)$/ { types++; next }
/^linkpass_[a-z_]+\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\} [0-9]+(\.[0-9]+)?$/ { samples++; last = $1; next }
{ bad = 1 }
END { exit !(!bad && types == 18 && samples == 48 && last ~ /^linkpass_event_ring_overflows_total\{/) }
EOF
(
  reads=0
  until [ -e "$tmp/stop-reader" ]; do
    for f in "$tmp"/*.prom; do
      [ -e "$f" ] || continue
      if ! awk -f "$tmp/valid.awk" "$f" 2>/dev/null; then
        cp "$f" "$tmp/bad.prom.$reads" 2>/dev/null || true
        echo "$f" >>"$tmp/bad-reads"
      fi
      reads=$((reads + 1))
    done
  done
  echo "$reads" >"$tmp/reads"
) &
reader=$!
pids+=("$reader")

nfiles_is() { [ "$(find "$tmp" -maxdepth 1 -name '*.prom' | wc -l)" -eq "$1" ]; }
sum_is() { [ "$(metric_sum "$1" "$2")" -eq "$3" ]; }
wait_until 10 "both ranks write a metrics file" nfiles_is 2
for f in "$tmp"/*.prom; do
  [ "$(metric "$f" linkpass_up)" = 1 ] || fail "$f: linkpass_up is not 1 while the process runs"
done
# Connection ends on mlx5_0, over both processes: each one moves at a pull.
ends=$(metric_sum linkpass_connections mlx5_0)
((ends > 0)) || fail "no connection uses mlx5_0 before the first pull"
echo "connection ends on mlx5_0: $ends"
# Every connection end gets a standby path on another port (LINKPASS_STANDBY).
standby_for_all() { (($(prom_sum linkpass_standby_paths "$tmp"/*.prom) == $(prom_sum linkpass_connections "$tmp"/*.prom))); }
wait_until 10 "a standby path for every connection end" standby_for_all

for i in $(seq "$pulls"); do
  sv link node0:mlx5_0 down
  wait_until 20 "failover $i of all $ends connection ends" at_least "event=failover" "$tmp/syslog" $((i * ends))
  sv link node0:mlx5_0 up
  wait_until 30 "failback $i of all $ends connection ends" at_least "event=failback" "$tmp/syslog" $((i * ends))
done
# After the last failback every connection end is home again.
wait_until 5 "the metrics show every connection back on mlx5_0" sum_is linkpass_connections mlx5_0 "$ends"
expect_clean_run # the final counters are written when the process ends

touch "$tmp/stop-reader"
wait "$reader"
reads=$(cat "$tmp/reads")
[ ! -e "$tmp/bad-reads" ] || fail "a metrics file was read incomplete or malformed: $(head -3 "$tmp/bad-reads")"
((reads >= 50)) || fail "the metrics files were read only $reads times"
echo "metrics files read $reads times, complete every time"

# Per process: its metrics file against its own event lines.
flaps_total=0
for f in "$tmp"/*.prom; do
  pid=$(sed -n 's/.*pid="\([0-9]*\)".*/\1/p' "$f" | head -1)
  [ -n "$pid" ] || fail "$f has no pid label"
  grep "linkpass\[$pid\]: " "$tmp/syslog" >"$tmp/lines.$pid" || true
  for dev in mlx5_0 mlx5_1 mlx5_2 mlx5_3; do
    want=$(grep -c "event=failover .* dev=$dev " "$tmp/lines.$pid" || true)
    got=$(metric "$f" linkpass_failovers_total "$dev")
    [ "$got" = "$want" ] || fail "pid $pid: linkpass_failovers_total{$dev} is $got, its syslog lines say $want"
    want=$(grep -c "event=failback .* new_dev=$dev " "$tmp/lines.$pid" || true)
    got=$(metric "$f" linkpass_failbacks_total "$dev")
    [ "$got" = "$want" ] || fail "pid $pid: linkpass_failbacks_total{$dev} is $got, its syslog lines say $want"
    [ "$(metric "$f" linkpass_path_up "$dev")" = 1 ] || fail "pid $pid: $dev is not up again"
  done
  want=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^replayed=/) { sub(/^replayed=/, "", $i); s += $i } } END { print s + 0 }' "$tmp/lines.$pid")
  got=$(metric "$f" linkpass_replayed_requests_total)
  [ "$got" = "$want" ] || fail "pid $pid: linkpass_replayed_requests_total is $got, its syslog lines say $want"
  want=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^replayed_bytes=/) { sub(/^replayed_bytes=/, "", $i); s += $i } } END { printf "%d\n", s }' "$tmp/lines.$pid")
  got=$(metric "$f" linkpass_replayed_bytes_total)
  [ "$got" = "$want" ] || fail "pid $pid: linkpass_replayed_bytes_total is $got, its syslog lines say $want"
  [ "$(metric "$f" linkpass_paths_lost_total)" = 0 ] || fail "pid $pid: a path was lost"
  [ "$(metric "$f" linkpass_up)" = 0 ] || fail "pid $pid: linkpass_up is not 0 in the file its exit left"
  [ "$(metric "$f" linkpass_event_ring_overflows_total)" = 0 ] || fail "pid $pid: the event ring overflowed"
  # The latest failover's duration is one of the durations its lines report
  # (both in whole microseconds; the half allows for the float's last digit).
  last=$(metric "$f" linkpass_last_failover_duration_seconds)
  awk -v s="$last" '/event=failover/ { for (i = 1; i <= NF; i++) if ($i ~ /^duration_us=/) { sub(/^duration_us=/, "", $i);
        d = s * 1e6 - $i; if (d < 0) d = -d; if (d < 0.5) ok = 1 } } END { exit !ok }' "$tmp/lines.$pid" ||
    fail "pid $pid: linkpass_last_failover_duration_seconds $last matches no failover line"
  flaps=$(metric "$f" linkpass_port_flaps_total mlx5_0)
  flaps_total=$((flaps_total + flaps))
  degraded=$(metric "$f" linkpass_degraded_seconds_total mlx5_0)
  if ((flaps != 0)); then # node0's process: its own cable was pulled
    [ "$flaps" = "$pulls" ] || fail "pid $pid: linkpass_port_flaps_total{mlx5_0} is $flaps after $pulls pulls"
    awk -v s="$degraded" 'BEGIN { exit !(s > 0) }' || fail "pid $pid: no degraded time on mlx5_0"
  else # node1's process: its port never went down
    [ "$degraded" = 0.000 ] || fail "pid $pid: $degraded s degraded on mlx5_0, which never went down"
  fi
  for dev in mlx5_1 mlx5_2 mlx5_3; do
    [ "$(metric "$f" linkpass_port_flaps_total "$dev")" = 0 ] || fail "pid $pid: $dev flapped, it was never pulled"
  done
done
((flaps_total == pulls)) || fail "$flaps_total flaps in all, $pulls pulls"
total=$(grep -c "event=failover" "$tmp/syslog")
((total == pulls * ends)) || fail "$total failover lines for $pulls pulls of $ends connection ends"
echo "PASS metrics: $pulls pulls, $total failovers and failbacks, counters match the syslog lines"
