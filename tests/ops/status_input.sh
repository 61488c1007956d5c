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

echo "PASS status_input: bad input gives a clear error or valid output"
