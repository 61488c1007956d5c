#!/usr/bin/env bash
# linkpass-status on bad input, without a fabric: every case either gives a
# clear error (named file, reason, exit 1) or a summary whose JSON parses;
# none crashes, hangs or prints what a tool cannot read.
# usage: status_input.sh STATUS_BINARY
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
status=${1:?usage: status_input.sh linkpass-status}
command -v jq >/dev/null || { echo "SKIP: jq is not installed (scripts/setup.sh installs it)"; exit 77; }
tmp=$(mktemp -d /tmp/lpstatus.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# run ARGS...: the status command, bounded (a hang is a failure), into
# $tmp/out and $tmp/err; its exit status in $rc.
run() {
  timeout 10 "$status" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc != 124)) || fail "linkpass-status $* did not finish within 10 s"
}
# valid_json WHAT: the last run's output is one JSON document, in UTF-8
# (which jq does not check: it reads a stray byte as U+FFFD).
valid_json() {
  jq -e . "$tmp/out" >/dev/null 2>&1 || fail "$1: the output is not valid JSON: $(cat "$tmp/out")"
  iconv -f UTF-8 -t UTF-8 "$tmp/out" >/dev/null 2>&1 || fail "$1: the output is not UTF-8: $(cat -v "$tmp/out")"
}

# 1. Values JSON cannot carry (NaN, infinities, an overflowing 1e999) are
# null, everywhere a number is printed; so is a file's age taken from a NaN
# timestamp.
cat >"$tmp/nan.prom" <<'PROM'
linkpass_path_up{device="mlx5_0",port="1",pid="1"} NaN
linkpass_connections{device="mlx5_0",port="1",pid="1"} +Inf
linkpass_failovers_total{device="mlx5_0",port="1",pid="1"} -Inf
linkpass_failbacks_total{device="mlx5_0",port="1",pid="1"} 1e999
linkpass_port_flaps_total{device="mlx5_0",port="1",pid="1"} nan
linkpass_degraded_seconds_total{device="mlx5_0",port="1",pid="1"} Inf
linkpass_replayed_requests_total{pid="1"} NaN
linkpass_replayed_bytes_total{pid="1"} +Inf
linkpass_paths_lost_total{pid="1"} -Inf
linkpass_last_failover_duration_seconds{pid="1"} NaN
linkpass_event_ring_overflows_total{pid="1"} 1e999
linkpass_up{pid="1"} 1
linkpass_metrics_updated_timestamp_seconds{pid="1"} NaN
PROM
run --log /dev/null --json "$tmp/nan.prom"
((rc == 0)) || fail "NaN and Inf values: exit $rc: $(cat "$tmp/err")"
valid_json "NaN and Inf values"
jq -e '.processes[0] | [.updated_age_seconds, .replayed_requests, .replayed_bytes, .paths_lost,
  .last_failover_seconds, .event_ring_overflows] | all(. == null)' "$tmp/out" >/dev/null ||
  fail "a process's NaN or Inf is not null: $(cat "$tmp/out")"
jq -e '.processes[0].devices[0] | [.path_up, .connections, .failovers, .failbacks, .flaps, .degraded_seconds] |
  all(. == null)' "$tmp/out" >/dev/null || fail "a port's NaN or Inf is not null: $(cat "$tmp/out")"
run --log /dev/null "$tmp/nan.prom"
grep -qE '^  mlx5_0:1 +\? ' "$tmp/out" || fail "the table shows a NaN path_up as up or down: $(cat "$tmp/out")"

# 2. Bytes that are not UTF-8 (a Latin-1 file name, a log line) become
# U+FFFD: JSON text is UTF-8.
latin1=$(printf '%s/caf\xe9.prom' "$tmp")
cp "$tmp/nan.prom" "$latin1"
printf 'Dec  1 10:00:00 node7 linkpass[1]: event=failover dev=mlx5_0 peer=caf\xe9 reason=port_down\n' >"$tmp/latin1.log"
run --log "$tmp/latin1.log" --json "$latin1"
((rc == 0)) || fail "a Latin-1 name: exit $rc: $(cat "$tmp/err")"
valid_json "a Latin-1 file name and log line"
jq -e '(.processes[0].file | endswith("caf\ufffd.prom")) and .events[0].peer == "caf\ufffd"' "$tmp/out" >/dev/null ||
  fail "invalid UTF-8 is not replaced by U+FFFD: $(cat "$tmp/out")"

# 3. A log named with --log that cannot be read is an error (exit 1, the
# file and the reason on stderr, nothing on stdout); the default
# /var/log/syslog is read only when it can be.
good="$tmp/nan.prom"
expect_error() { # WHAT REASON ARGS...: exit 1, REASON on stderr, no output
  local what=$1 reason=$2
  shift 2
  run "$@"
  ((rc == 1)) || fail "$what: exit $rc, expected 1 (stderr: $(cat "$tmp/err"))"
  grep -q -- "$reason" "$tmp/err" || fail "$what: stderr does not say '$reason': $(cat "$tmp/err")"
  [ ! -s "$tmp/out" ] || fail "$what: a summary was printed: $(cat "$tmp/out")"
}
expect_error "a missing --log" "cannot read the log $tmp/missing.log: No such file or directory" \
  --log "$tmp/missing.log" --json "$good"
expect_error "a directory as --log" "cannot read the log $tmp: Is a directory" --log "$tmp" "$good"
expect_error "a device as --log" "cannot read the log /dev/zero: not a regular file" --log /dev/zero "$good"
printf 'x\n' >"$tmp/secret.log"
chmod 000 "$tmp/secret.log"
chmod 755 "$tmp"
chmod 644 "$good"
if [ "$(id -u)" = 0 ]; then
  # root reads any file: the case needs another user.
  if command -v setpriv >/dev/null; then
    nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    run_as_nobody() { timeout 10 "${nobody[@]}" "$status" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
    run_as_nobody --log "$tmp/secret.log" "$good"
    ((rc == 1)) && grep -q "cannot read the log $tmp/secret.log: Permission denied" "$tmp/err" ||
      fail "an unreadable --log: exit $rc: $(cat "$tmp/err")"
  else
    echo "note: not root-free and no setpriv: the permission case is not run"
  fi
else
  expect_error "an unreadable --log" "cannot read the log $tmp/secret.log: Permission denied" --log "$tmp/secret.log" "$good"
fi
# A pipe is a log (bash's <(journalctl ...)).
run --log <(cat "$tmp/latin1.log") --json "$good"
((rc == 0)) && jq -e '.events | length == 1' "$tmp/out" >/dev/null || fail "a pipe as --log: exit $rc: $(cat "$tmp/out" "$tmp/err")"
# The default log, whatever this machine has there: never an error.
run --json "$good"
((rc == 0)) || fail "the default log: exit $rc: $(cat "$tmp/err")"
valid_json "the default log"

# 4. A metrics file named that cannot be read, or is no file, is the same
# error; in a directory such a file is skipped with a word, and a FIFO
# named *.prom does not hang the command.
expect_error "a missing FILE.prom" "cannot read the metrics file $tmp/missing.prom: No such file or directory" \
  --log /dev/null "$tmp/missing.prom" "$good"
expect_error "a directory as FILE.prom" "cannot read the metrics file $tmp: Is a directory" --log /dev/null "$tmp"
expect_error "a device as FILE.prom" "cannot read the metrics file /dev/zero: not a regular file" --log /dev/null /dev/zero
mkdir -p "$tmp/dir/sub.prom"
cp "$good" "$tmp/dir/ok.prom"
mkfifo "$tmp/dir/fifo.prom"
run --dir "$tmp/dir" --log /dev/null --json
((rc == 0)) || fail "a directory with a FIFO and a subdirectory named *.prom: exit $rc: $(cat "$tmp/err")"
valid_json "a directory with a FIFO"
jq -e '.processes | length == 1' "$tmp/out" >/dev/null || fail "the directory's one metrics file is not read: $(cat "$tmp/out")"
grep -q "skipping $tmp/dir/fifo.prom: not a regular file" "$tmp/err" || fail "the FIFO is not named: $(cat "$tmp/err")"
grep -q "skipping $tmp/dir/sub.prom: Is a directory" "$tmp/err" || fail "the subdirectory is not named: $(cat "$tmp/err")"

# 5. Lines of a metrics file that are not what linkpass writes are left out,
# each said with its file and line (the first few of a file), and never read
# as something else.
pad=$(head -c 2100 /dev/zero | tr '\0' x)
{
  echo '# HELP linkpass_connections Connections whose path currently uses the NIC port.'
  echo 'linkpass_connections{device="mlx5_0",port="1",pid="7"} 3'
  # Cut at 2047 characters, the head's value was 12 and the tail a line of
  # its own that set paths_lost to 99.
  printf 'linkpass_connections{device="mlx5_0",port="1",pid="7",pad="%s"} 12345\n' "${pad:0:1983}"
  printf 'linkpass_paths_lost_total{pid="7",pad="%s",x="1"}linkpass_paths_lost_total{pid="7"} 99\n' "${pad:0:2000}"
  echo 'linkpass_up{pid="7"} 1'
  echo 'linkpass_metrics_updated_timestamp_seconds{pid="7"} 1e10'
  echo 'linkpass_replayed_requests_total{pid="7"}'
  echo 'linkpass_replayed_bytes_total{pid="7"} 12 bytes'
  echo 'linkpass_failovers_total{device="mlx5_0",port="x",pid="7"} 5'
  echo 'linkpass_failbacks_total{device="mlx5_0",port="1",pid="7"} 2 1700000000000'
} >"$tmp/bad.prom"
run --log /dev/null --json "$tmp/bad.prom"
((rc == 0)) || fail "malformed lines: exit $rc: $(cat "$tmp/err")"
valid_json "malformed lines"
jq -e '.processes[0] | .pid == 7 and .paths_lost == 0 and .replayed_requests == 0 and .replayed_bytes == 0 and
  (.devices[0] | .connections == 3 and .failovers == 0 and .failbacks == 2)' "$tmp/out" >/dev/null ||
  fail "a malformed line was read as a value: $(cat "$tmp/out")"
grep -q "bad.prom:3: longer than 2047 characters: line left out" "$tmp/err" || fail "the long line is not named: $(cat "$tmp/err")"
grep -q "bad.prom:7: no number after the labels" "$tmp/err" || fail "the line without a value is not named: $(cat "$tmp/err")"
grep -q "bad.prom: 5 lines left out in all" "$tmp/err" || fail "the count of bad lines is missing: $(cat "$tmp/err")"
n=$(grep -c "line left out" "$tmp/err")
((n == 3)) || fail "$n bad lines said, expected the first 3: $(cat "$tmp/err")"

# A pid beyond an int is no pid (atoi made 4294967297 pid 1, which always
# runs), and a file without a pid sorts before one of INT_MAX.
printf 'linkpass_up{pid="4294967297"} 1\n' >"$tmp/big.prom"
printf 'linkpass_up{pid="2147483647"} 1\n' >"$tmp/max.prom"
printf 'linkpass_paths_lost_total{job="x"} 0\n' >"$tmp/nopid.prom"
run --log /dev/null --json "$tmp/big.prom"
grep -q 'big.prom:1: pid="4294967297" is no process id' "$tmp/err" || fail "a pid beyond an int is not named: $(cat "$tmp/err")"
jq -e '.processes | length == 0' "$tmp/out" >/dev/null || fail "a pid beyond an int was read: $(cat "$tmp/out")"
run --log /dev/null --json "$tmp/max.prom" "$tmp/nopid.prom"
jq -e '[.processes[].pid] == [-1, 2147483647]' "$tmp/out" >/dev/null || fail "processes not in pid order: $(cat "$tmp/out")"

# A pid that runs (this shell) with a file not rewritten for 100 s is
# stale, not running: the pid is another process's (a container's, a
# reused one) or linkpass there is stuck.  Written a moment ago: running.
now=$(date +%s)
printf 'linkpass_up{pid="%d"} 1\nlinkpass_metrics_updated_timestamp_seconds{pid="%d"} %d\n' $$ $$ $((now - 100)) >"$tmp/stale.prom"
run --log /dev/null --json "$tmp/stale.prom"
jq -e ".processes[0].state == \"stale\"" "$tmp/out" >/dev/null || fail "a file not rewritten for 100 s is not stale: $(cat "$tmp/out")"
run --log /dev/null "$tmp/stale.prom"
grep -q "the file is not rewritten any more" "$tmp/out" || fail "the table does not say why it is stale: $(cat "$tmp/out")"
printf 'linkpass_up{pid="%d"} 1\nlinkpass_metrics_updated_timestamp_seconds{pid="%d"} %d\n' $$ $$ "$now" >"$tmp/live.prom"
run --log /dev/null --json "$tmp/live.prom"
jq -e ".processes[0].state == \"running\"" "$tmp/out" >/dev/null || fail "a file written now is not running: $(cat "$tmp/out")"

# A rank in a container of its own, pid 1 there (and pid 1 always runs
# here): its host label is not this host's, so kill() says nothing of it
# and only its file's age does.  Not rewritten for 100 s: gone (it was
# "stale" when the pid was taken for one of this host's); written now:
# running.  The host is in the table and the JSON.
other="not-$(hostname)"
printf 'linkpass_up{pid="1",host="%s"} 1\nlinkpass_metrics_updated_timestamp_seconds{pid="1",host="%s"} %d\n' \
  "$other" "$other" $((now - 100)) >"$tmp/pod.prom"
run --log /dev/null --json "$tmp/pod.prom"
jq -e --arg h "$other" '.processes[0] | .state == "gone" and .host == $h' "$tmp/out" >/dev/null ||
  fail "another host's rank not rewritten for 100 s is not gone: $(cat "$tmp/out")"
run --log /dev/null "$tmp/pod.prom"
grep -q "^pid 1 on $other  gone" "$tmp/out" || fail "the table does not name the rank's host: $(cat "$tmp/out")"
printf 'linkpass_up{pid="1",host="%s"} 1\nlinkpass_metrics_updated_timestamp_seconds{pid="1",host="%s"} %d\n' \
  "$other" "$other" "$now" >"$tmp/pod.prom"
run --log /dev/null --json "$tmp/pod.prom"
jq -e '.processes[0].state == "running"' "$tmp/out" >/dev/null || fail "another host's rank written now is not running: $(cat "$tmp/out")"

# A directory of more files than the command holds keeps those written
# last: the live processes of a node whose old files were not removed.
mkdir "$tmp/many"
for i in $(seq 1 300); do
  printf 'linkpass_up{pid="%d"} 0\nlinkpass_metrics_updated_timestamp_seconds{pid="%d"} %d\n' $((100000 + i)) $((100000 + i)) $((now - 1000 + i)) >"$tmp/many/r$i.prom"
done
run --log /dev/null --json --dir "$tmp/many"
jq -e '[.processes[].pid] | min == 100045 and length == 256' "$tmp/out" >/dev/null ||
  fail "not the 256 files written last: $(jq -c '[.processes[].pid] | [min, length]' "$tmp/out")"
grep -q "300 metrics files in $tmp/many beyond 256: the 44 written longest ago left out" "$tmp/err" || fail "the files left out are not said: $(cat "$tmp/err")"

# More ports than the table holds: said, once.
for i in $(seq 0 70); do echo "linkpass_path_up{device=\"mlx5_$i\",port=\"1\",pid=\"8\"} 1"; done >"$tmp/ports.prom"
run --log /dev/null --json "$tmp/ports.prom"
valid_json "71 ports"
grep -q "ports.prom: more than 64 ports: the others left out" "$tmp/err" || fail "the ports left out are not said: $(cat "$tmp/err")"

# A file named with no linkpass sample is said.
printf 'node_load1 0.5\n' >"$tmp/other.prom"
run --log /dev/null "$tmp/other.prom"
((rc == 0)) && grep -q "other.prom has no linkpass sample" "$tmp/err" || fail "a file with no linkpass sample: exit $rc: $(cat "$tmp/err")"

# 6. An event line longer than the command reads is left out, and its tail
# is not taken for an event of its own.
{
  printf 'Dec  1 10:00:00 node7 linkpass[5]: event=failover dev=mlx5_0 new_dev=mlx5_1 pad=%s\n' "$pad"
  printf 'Dec  1 10:00:00 node7 kernel: %s linkpass[5]: event=failback dev=bogus\n' "${pad:0:1000}"
  printf 'Dec  1 10:00:01 node7 linkpass[5]: event=failover dev=mlx5_2 new_dev=mlx5_3\n'
} >"$tmp/long.log"
run --log "$tmp/long.log" --json "$good"
((rc == 0)) || fail "long event lines: exit $rc: $(cat "$tmp/err")"
valid_json "long event lines"
jq -e '[.events[].dev] == ["mlx5_2"]' "$tmp/out" >/dev/null || fail "a long event line was read: $(cat "$tmp/out")"
grep -q "long.log: 1 linkpass event lines longer than 1023 characters" "$tmp/err" ||
  fail "the long event line is not said: $(cat "$tmp/err")"

# 6b. A port drained as degraded is no move: the table says what was
# measured and the hold-down, the JSON has its port, evidence and hold-down.
printf 'Dec  1 10:00:02 node7 linkpass[5]: event=degraded dev=mlx5_1 port=1 evidence=resends resent_ppm=9000 threshold_ppm=2000 better=mlx5_0:1 better_ppm=0 windows=3 holddown_ms=500 flap=1 time=2026-12-01T10:00:02.000000Z\n' >"$tmp/degraded.log"
run --log "$tmp/degraded.log" --events 1 "$good"
((rc == 0)) || fail "a degraded line: exit $rc: $(cat "$tmp/err")"
grep -q 'degraded  mlx5_1:1 drained (evidence=resends resent_ppm=9000 threshold_ppm=2000 better=mlx5_0:1 better_ppm=0; hold-down 500 ms)' "$tmp/out" ||
  fail "a degraded line is not shown as a drained port: $(cat "$tmp/out")"
run --log "$tmp/degraded.log" --json "$good"
valid_json "a degraded line"
jq -e '.events[0] | .event == "degraded" and .port == "1" and .evidence == "resends" and .holddown_ms == "500"' "$tmp/out" \
  >/dev/null || fail "the degraded line's fields are not in the JSON: $(cat "$tmp/out")"

# 7. A metrics file pattern in / means the directory /, not "".
LINKPASS_METRICS_FILE=/linkpass-%p.prom run --log /dev/null --events 0
((rc == 0)) || fail "LINKPASS_METRICS_FILE=/linkpass-%p.prom: exit $rc: $(cat "$tmp/err")"

# 7b. %h in the pattern's directory is this host's name, as the plugin
# expands it; %p there is a directory per process, which no default can
# name: said, exit 1.
mkdir -p "$tmp/by-host-$(hostname)"
cp "$good" "$tmp/by-host-$(hostname)/linkpass-1.prom"
LINKPASS_METRICS_FILE="$tmp/by-host-%h/linkpass-%p.prom" run --log /dev/null --events 0 --json
((rc == 0)) || fail "%h in the metrics directory: exit $rc: $(cat "$tmp/err")"
jq -e '[.processes[].pid] == [1]' "$tmp/out" >/dev/null || fail "%h in the metrics directory: $(cat "$tmp/out")"
LINKPASS_METRICS_FILE="$tmp/%p/linkpass.prom" expect_error "%p in the metrics directory" "name one with --dir" \
  --log /dev/null --events 0

# 7c. Label values are read as the text format escapes them (\\, \" and
# \n), and a '}' or a key inside a value is part of the value.
cat >"$tmp/escaped.prom" <<'PROM'
linkpass_path_up{device="a\"b}\\c,pid=\"9\"",port="1",pid="3"} 1
linkpass_connections{device="a\"b}\\c,pid=\"9\"",port="1",pid="3"} 5
linkpass_up{pid="3"} 1
linkpass_metrics_updated_timestamp_seconds{pid="3"} 1764633600
PROM
run --log /dev/null --json "$tmp/escaped.prom"
((rc == 0)) || fail "escaped labels: exit $rc: $(cat "$tmp/err")"
valid_json "escaped labels"
jq -e '.processes[0].pid == 3 and .processes[0].devices[0].device == "a\"b}\\c,pid=\"9\"" and
  .processes[0].devices[0].connections == 5' "$tmp/out" >/dev/null ||
  fail "escaped label values were misread: $(cat "$tmp/out") $(cat "$tmp/err")"

# 8. A FIFO named as the log is read once its writer comes, not taken for
# an empty file because nobody had it open for writing yet.  The status
# command opens it first (in the background); the write's open waits for it.
mkfifo "$tmp/log.fifo"
timeout 10 "$status" --log "$tmp/log.fifo" --json "$good" >"$tmp/out" 2>"$tmp/err" &
reader=$!
printf 'Dec  1 10:00:02 node7 linkpass[5]: event=failover dev=mlx5_4 new_dev=mlx5_5\n' >"$tmp/log.fifo"
wait "$reader"
rc=$?
((rc == 0)) || fail "a FIFO as the log: exit $rc: $(cat "$tmp/err")"
jq -e '[.events[].dev] == ["mlx5_4"]' "$tmp/out" >/dev/null || fail "the FIFO's event was not read: $(cat "$tmp/out")"

echo "PASS status_input: bad input gives a clear error or valid output"
