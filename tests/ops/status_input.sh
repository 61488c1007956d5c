#!/usr/bin/env bash
# linkpass-status on bad input, without a fabric: every case either gives a
# clear error (named file, reason, exit 1) or a summary whose JSON parses;
# none crashes, hangs or prints what a tool cannot read.
# usage: status_input.sh STATUS_BINARY
set -uo pipefail
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

echo "PASS status_input: bad input gives a clear error or valid output"
