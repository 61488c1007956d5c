#!/usr/bin/env bash
# linkpass-status on a live run: while node0's mlx5_0 cable is out, the
# table and the JSON say what the metrics files and syslog say (the port
# DOWN for node0's process, its connections on other ports, the failover
# events); after the run both processes are "exited"; a file whose process
# died without a last write is reported "gone".
# usage: status.sh STATUS_BINARY    (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
status=${1:?usage: status.sh linkpass-status}
command -v jq >/dev/null || skip "jq is not installed (scripts/setup.sh installs it)"
dir="$tmp/textfile"
mkdir -p "$dir"
export LINKPASS_METRICS_FILE="$dir/linkpass-%h-%p.prom"
start_sink
sv up "$CONFS/two-hosts-4nic.conf"
run_perf 1M 10
two_files() { [ "$(find "$dir" -name '*.prom' | wc -l)" -eq 2 ]; }
wait_until 10 "two metrics files" two_files
sv link node0:mlx5_0 down
wait_until 20 "failover lines" has_line "event=failover" "$tmp/syslog"
down_seen() {
  "$status" --log "$tmp/syslog" --json >"$tmp/status.json" 2>"$tmp/status.err" &&
    jq -e '[.processes[] | select(.state == "running")] | length == 2' "$tmp/status.json" >/dev/null &&
    jq -e '[.processes[].devices[] | select(.device == "mlx5_0" and .path_up == false and .connections == 0)] | length == 1' \
      "$tmp/status.json" >/dev/null
}
wait_until 10 "linkpass-status --json shows node0's mlx5_0 down with no connection" down_seen
jq -e '[.events[] | select(.event == "failover" and .dev == "mlx5_0")] | length >= 1' "$tmp/status.json" >/dev/null ||
  fail "linkpass-status --json lists no failover event off mlx5_0: $(cat "$tmp/status.json")"
jq -e '(.events | length) as $n | [.events[] | select(.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$"))] | length == $n' \
  "$tmp/status.json" >/dev/null || fail "linkpass-status --json has an event without its time: $(cat "$tmp/status.json")"
jq -e '[.processes[] | select(.syslog_lines_lost == 0)] | length == 2' "$tmp/status.json" >/dev/null ||
  fail "linkpass-status --json does not say that no event line was lost from syslog: $(cat "$tmp/status.json")"
# The JSON's counters are the files' own.
for f in "$dir"/*.prom; do
  pid=$(sed -n 's/.*pid="\([0-9]*\)".*/\1/p' "$f" | head -1)
  want=$(metric "$f" linkpass_failovers_total mlx5_0)
  got=$(jq -r --argjson p "$pid" '.processes[] | select(.pid == $p) | .devices[] | select(.device == "mlx5_0") | .failovers' "$tmp/status.json")
  [ -n "$got" ] || fail "pid $pid is missing from linkpass-status --json"
  ((got <= want)) || fail "pid $pid: linkpass-status says $got failovers off mlx5_0, its file $want (read later)"
done
"$status" --log "$tmp/syslog" >"$tmp/status.txt" || fail "linkpass-status failed"
grep -qE '^  mlx5_0:1 +DOWN ' "$tmp/status.txt" || fail "the table shows no DOWN mlx5_0: $(cat "$tmp/status.txt")"
grep -q '^last events:' "$tmp/status.txt" || fail "the table shows no events"
grep -qE '^  [0-9-]{10}T[0-9:.]{15}Z pid [0-9]+ failover +mlx5_0 -> mlx5_[123]' "$tmp/status.txt" || fail "no 'failover mlx5_0 -> ...' event line: $(cat "$tmp/status.txt")"
cat "$tmp/status.txt"
# The same events from standard input, as journalctl would hand them over.
"$status" --log - --json <"$tmp/syslog" >"$tmp/stdin.json" || fail "linkpass-status --log - failed"
jq -e '[.events[] | select(.event == "failover" and .dev == "mlx5_0")] | length >= 1' "$tmp/stdin.json" >/dev/null ||
  fail "linkpass-status --log - read no failover event from standard input: $(cat "$tmp/stdin.json")"
sv link node0:mlx5_0 up
expect_clean_run
"$status" --json --events 0 >"$tmp/after.json"
jq -e '[.processes[] | select(.state == "exited")] | length == 2' "$tmp/after.json" >/dev/null ||
  fail "after the run the processes are not both 'exited': $(cat "$tmp/after.json")"
# A process killed without its last write: its file still says up, its pid is gone.
f=$(ls "$dir"/*.prom | head -1)
sed 's/^\(linkpass_up{pid="\)[0-9]*\(".*}\) 0$/\1999999999\2 1/; s/pid="[0-9]*"/pid="999999999"/g' "$f" >"$dir/linkpass-dead.prom"
"$status" --json --events 0 >"$tmp/dead.json"
jq -e '.processes[] | select(.pid == 999999999) | .state == "gone"' "$tmp/dead.json" >/dev/null ||
  fail "a dead process's file is not reported gone: $(cat "$tmp/dead.json")"
"$status" --events 0 | grep -q "gone without a last write" || fail "the table does not say the dead process is gone"
"$status" --events x >/dev/null 2>&1 && fail "--events x was accepted"
"$status" --dir "$tmp/nonexistent" >/dev/null 2>"$tmp/err" && fail "a missing directory was accepted"
grep -q "cannot open the metrics directory" "$tmp/err" || fail "no clear error for a missing directory"
echo "PASS status: table and JSON follow a cable pull; exited and gone processes are told apart"
