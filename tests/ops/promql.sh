#!/usr/bin/env bash
# The dashboard's queries and the alerting rules, evaluated by Prometheus'
# own engine (`promtool test rules`) over series a node with four processes
# would have written, each in a container of its own (host pod-a to pod-d)
# and each pid 1 in its own PID namespace, so that only the host label
# tells them apart:
#  - pod-a and pod-b are live ranks; mlx5_0:1 went down at minute 5 and
#    stayed down; each rank counted the same 4 flaps of it;
#  - pod-c's was killed at minute 4 (its file says linkpass_up 1, its
#    timestamp stopped; it last saw mlx5_1:1 down and a 2 s failover);
#  - pod-d's exited cleanly at minute 4 (linkpass_up 0).
# What must hold: a port's state and a node's last failover come from live
# processes only (a killed rank's stale file is not counted), a port's flaps
# are counted once however many ranks saw them, and the alerts say so too.
# usage: promql.sh DASHBOARD RULES
set -euo pipefail
dashboard=${1:?usage: promql.sh DASHBOARD RULES}
rules=${2:?usage: promql.sh DASHBOARD RULES}
command -v promtool >/dev/null || { echo "SKIP: promtool (Debian's prometheus package) is not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
tmp=$(mktemp -d /tmp/lppromql.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# A panel's query as Prometheus would run it for the whole time range.
panel() {
  local q
  q=$(jq -r --arg t "$1" '.panels[] | select(.title | startswith($t)) | .targets[0].expr' "$dashboard")
  [ -n "$q" ] || { echo "FAIL: no dashboard panel titled '$1...'" >&2; exit 1; }
  q=${q//\$instance/.*}
  echo "${q//\$__rate_interval/5m}"
}
path=$(panel "Path state")
conns=$(panel "Connections per NIC port")
flaps=$(panel "Port flaps")
last=$(panel "Last failover duration")
gone=$(panel "Processes gone")
resend=$(panel "Resend ratio per NIC port")
drained=$(panel "Ports drained as degraded")

cp "$rules" "$tmp/rules.yml"
cat >"$tmp/test.yml" <<EOF
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - {series: 'linkpass_up{instance="n0",pid="1",host="pod-a"}', values: '1x20'}
  - {series: 'linkpass_up{instance="n0",pid="1",host="pod-b"}', values: '1x20'}
  - {series: 'linkpass_up{instance="n0",pid="1",host="pod-c"}', values: '1x20'}
  - {series: 'linkpass_up{instance="n0",pid="1",host="pod-d"}', values: '1 1 1 1 0x16'}
  - {series: 'linkpass_metrics_updated_timestamp_seconds{instance="n0",pid="1",host="pod-a"}', values: '0+60x20'}
  - {series: 'linkpass_metrics_updated_timestamp_seconds{instance="n0",pid="1",host="pod-b"}', values: '0+60x20'}
  - {series: 'linkpass_metrics_updated_timestamp_seconds{instance="n0",pid="1",host="pod-c"}', values: '0+60x4 240x16'}
  - {series: 'linkpass_metrics_updated_timestamp_seconds{instance="n0",pid="1",host="pod-d"}', values: '0+60x4 240x16'}
  - {series: 'linkpass_path_up{instance="n0",device="mlx5_0",port="1",pid="1",host="pod-a"}', values: '1x4 0x16'}
  - {series: 'linkpass_path_up{instance="n0",device="mlx5_0",port="1",pid="1",host="pod-b"}', values: '1x4 0x16'}
  - {series: 'linkpass_path_up{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-a"}', values: '1x20'}
  - {series: 'linkpass_path_up{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-b"}', values: '1x20'}
  - {series: 'linkpass_path_up{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-c"}', values: '1 0x19'}
  - {series: 'linkpass_path_up{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-d"}', values: '1x20'}
  - {series: 'linkpass_connections{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-a"}', values: '2x20'}
  - {series: 'linkpass_connections{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-b"}', values: '2x20'}
  - {series: 'linkpass_connections{instance="n0",device="mlx5_1",port="1",pid="1",host="pod-c"}', values: '7x20'}
  - {series: 'linkpass_port_flaps_total{instance="n0",device="mlx5_0",port="1",pid="1",host="pod-a"}', values: '0x6 1 2 3 4x12'}
  - {series: 'linkpass_port_flaps_total{instance="n0",device="mlx5_0",port="1",pid="1",host="pod-b"}', values: '0x6 1 2 3 4x12'}
  - {series: 'linkpass_last_failover_duration_seconds{instance="n0",pid="1",host="pod-a"}', values: '0.005x20'}
  - {series: 'linkpass_last_failover_duration_seconds{instance="n0",pid="1",host="pod-b"}', values: '0.004x20'}
  - {series: 'linkpass_last_failover_duration_seconds{instance="n0",pid="1",host="pod-c"}', values: '2x20'}
  - {series: 'linkpass_port_resend_ratio{instance="n0",device="mlx5_2",port="1",pid="1",host="pod-a"}', values: '0.01x20'}
  - {series: 'linkpass_port_resend_ratio{instance="n0",device="mlx5_2",port="1",pid="1",host="pod-b"}', values: '0.012x20'}
  - {series: 'linkpass_port_resend_ratio{instance="n0",device="mlx5_2",port="1",pid="1",host="pod-c"}', values: '0.5x20'}
  - {series: 'linkpass_port_degraded_total{instance="n0",device="mlx5_2",port="1",pid="1",host="pod-a"}', values: '0x6 1x13'}
  - {series: 'linkpass_port_degraded_total{instance="n0",device="mlx5_2",port="1",pid="1",host="pod-b"}', values: '0x6 1x13'}
  - {series: 'linkpass_syslog_lines_lost_total{instance="n0",pid="1",host="pod-a"}', values: '0x8 3x12'}
  - {series: 'linkpass_syslog_lines_lost_total{instance="n0",pid="1",host="pod-b"}', values: '0x20'}
  promql_expr_test:
  - expr: '$path'
    eval_time: 10m
    exp_samples:
    - {labels: '{instance="n0",device="mlx5_0",port="1"}', value: 0}
    - {labels: '{instance="n0",device="mlx5_1",port="1"}', value: 1}
  - expr: '$conns'
    eval_time: 10m
    exp_samples:
    - {labels: '{instance="n0",device="mlx5_1",port="1"}', value: 4}
  # 4 flaps a rank within the window: a sum over the two ranks would be
  # 8, their max 4.
  - expr: '($flaps) > 6'
    eval_time: 10m
    exp_samples: []
  - expr: '($flaps) > 3'
    eval_time: 10m
    exp_samples:
    - {labels: '{instance="n0",device="mlx5_0",port="1"}', value: 4}
  - expr: '$last'
    eval_time: 10m
    exp_samples:
    - {labels: '{instance="n0"}', value: 0.005}
  - expr: '$gone'
    eval_time: 10m
    exp_samples:
    - {labels: '{instance="n0"}', value: 1}
  # a port's resend ratio from live ranks only (the killed rank's 0.5 is stale)
  - expr: '$resend'
    eval_time: 10m
    exp_samples:
    - {labels: '{instance="n0",device="mlx5_2",port="1"}', value: 0.012}
  # drained once, seen by two ranks: counted once (a sum would say 2)
  - expr: '($drained) > 0'
    eval_time: 8m
    exp_samples:
    - {labels: '{instance="n0",device="mlx5_2",port="1"}', value: 1}
  alert_rule_test:
  - eval_time: 12m
    alertname: LinkpassPortDown
    exp_alerts:
    - exp_labels: {severity: warning, instance: n0, device: mlx5_0, port: '1'}
      exp_annotations: {summary: 'n0 mlx5_0:1 unusable for 5 minutes'}
  - eval_time: 12m
    alertname: LinkpassLinkFlapping
    exp_alerts: []
  - eval_time: 12m
    alertname: LinkpassProcessVanished
    exp_alerts:
    - exp_labels: {severity: info, instance: n0, host: pod-c, pid: '1'}
      exp_annotations: {summary: 'n0 pod-c pid 1 stopped writing its metrics without exiting cleanly: remove its file'}
  - eval_time: 12m
    alertname: LinkpassSlowFailover
    exp_alerts: []
  # pod-a's daemon refused 3 lines at minute 9; pod-b lost none
  - eval_time: 12m
    alertname: LinkpassSyslogLinesLost
    exp_alerts:
    - exp_labels: {severity: info, instance: n0, host: pod-a, pid: '1'}
      exp_annotations: {summary: 'n0 pod-a pid 1: failover lines missing from syslog (in NCCL''s log only)'}
EOF
promtool check rules "$tmp/rules.yml" >/dev/null
(cd "$tmp" && promtool test rules test.yml) || { echo "FAIL: the dashboard's queries or the alerting rules count what they must not"; exit 1; }
echo "PASS promql: live processes only, one flap and one drain count a port, the alerts agree"
