#!/usr/bin/env bash
# The metrics as operators collect them: Debian's prometheus-node-exporter,
# its textfile collector pointed at the directory the ranks write to
# (LINKPASS_METRICS_FILE=<dir>/linkpass-%h-%p.prom, one file per process),
# scraped over HTTP on loopback while a cable is pulled and put back.
#  - every linkpass series is in the scrape, for both processes, and after
#    the run every sample of every file is in the scrape with its value;
#  - the scrape follows the pull: the port's path goes to 0 and its
#    connections to the other ports, then back;
#  - promtool check metrics (Debian's prometheus package) accepts each file;
#  - the exited processes say linkpass_up 0 (a dashboard leaves them out);
#  - every series the Grafana dashboard (docs/grafana/linkpass.json) queries
#    is one the scrape has.
# usage: scrape.sh    (env: SIMVERBS PERF PLUGIN SINK CONFS)
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
exporter=$(command -v prometheus-node-exporter || command -v node_exporter) ||
  skip "prometheus-node-exporter is not installed (scripts/setup.sh installs it)"
command -v promtool >/dev/null || skip "promtool (Debian's prometheus package) is not installed"
command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq is not installed"
dashboard="$(dirname "$0")/../../docs/grafana/linkpass.json"

dir="$tmp/textfile"
mkdir -p "$dir"
export LINKPASS_METRICS_FILE="$dir/linkpass-%h-%p.prom"
# A free loopback port: the kernel's choice for a socket we close again.
port=""
for try in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 20000))
  "$exporter" --web.listen-address="127.0.0.1:$port" --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory="$dir" >"$tmp/exporter.log" 2>&1 &
  exp_pid=$!
  pids+=("$exp_pid")
  up() { curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null; }
  for _ in $(seq 100); do up && break; kill -0 "$exp_pid" 2>/dev/null || break; sleep 0.05; done
  up && break
  kill "$exp_pid" 2>/dev/null || true
  port=""
done
[ -n "$port" ] || fail "the node exporter did not start: $(tail -3 "$tmp/exporter.log")"
scrape() { curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/scrape" && grep '^linkpass_' "$tmp/scrape" >"$tmp/lp" || true; }
# sample NAME LABEL-SUBSTRING...: the value of the first scraped sample whose labels contain them all.
sample() {
  local name=$1
  shift
  awk -v n="$name{" -v want="$*" 'index($1, n) == 1 { ok = 1; k = split(want, w, " ");
      for (i = 1; i <= k; i++) if (index($1, w[i]) == 0) ok = 0; if (ok) { print $2; exit } }' "$tmp/lp"
}
scraped_sum() { awk -v n="$1{" -v d="device=\"$2\"" 'index($1, n) == 1 && index($1, d) { s += $2 } END { print s + 0 }' "$tmp/lp"; }

start_sink
sv up "$CONFS/two-hosts-4nic.conf"
run_perf 1M 10
two_up() { scrape && [ "$(grep -c '^linkpass_up{.*} 1$' "$tmp/lp")" -eq 2 ]; }
wait_until 15 "the scrape shows two running processes" two_up
families=$(sed -n 's/^# TYPE \(linkpass_[a-z_]*\) .*/\1/p' "$tmp/scrape" | sort -u | wc -l)
((families == 18)) || fail "the scrape has $families linkpass families, the plugin writes 18"
ends=$(scraped_sum linkpass_connections mlx5_0)
((ends > 0)) || fail "no connection on mlx5_0 in the scrape"
pids_seen=$(sed -n 's/^linkpass_up{.*pid="\([0-9]*\)".*/\1/p' "$tmp/lp" | sort -u | tr '\n' ' ')
echo "scraped: 2 processes ($pids_seen), $ends connection ends on mlx5_0"

sv link node0:mlx5_0 down
moved() { scrape && [ "$(scraped_sum linkpass_connections mlx5_0)" -eq 0 ] &&
  [ "$(scraped_sum linkpass_failovers_total mlx5_0)" -eq "$ends" ] && [ "$(sample linkpass_path_up 'device="mlx5_0"')" = 0 ]; }
wait_until 20 "the scrape shows mlx5_0 down, its $ends connection ends moved off it" moved
others=$(($(scraped_sum linkpass_connections mlx5_1) + $(scraped_sum linkpass_connections mlx5_2) + $(scraped_sum linkpass_connections mlx5_3)))
((others >= ends)) || fail "after the pull the other ports carry $others connection ends, fewer than the $ends moved"
sv link node0:mlx5_0 up
back() { scrape && [ "$(scraped_sum linkpass_connections mlx5_0)" -eq "$ends" ] &&
  [ "$(scraped_sum linkpass_failbacks_total mlx5_0)" -eq "$ends" ]; }
wait_until 30 "the scrape shows every connection end back on mlx5_0" back
expect_clean_run

# The files are final now: the scrape must carry each of their samples, equal.
# canon SAMPLE: its labels sorted (the exporter orders them by name).
canon() {
  local name=${1%%\{*} labels=${1#*\{}
  labels=${labels%\}}
  echo "$name{$(tr ',' '\n' <<<"$labels" | sort | paste -sd, -)}"
}
scrape
while read -r key value; do echo "$(canon "$key") $value"; done <"$tmp/lp" >"$tmp/lp.canon"
for f in "$dir"/*.prom; do
  promtool check metrics <"$f" >"$tmp/promtool.out" 2>&1 || fail "promtool check metrics refuses $f: $(cat "$tmp/promtool.out")"
  n=0
  while read -r key value; do
    key=$(canon "$key")
    got=$(awk -v k="$key" '$1 == k { print $2; exit }' "$tmp/lp.canon")
    [ -n "$got" ] || fail "$key (in $(basename "$f")) is not in the scrape"
    awk -v a="$got" -v b="$value" 'BEGIN { exit !(a + 0 == b + 0) }' || fail "$key: the scrape says $got, the file $value"
    n=$((n + 1))
  done < <(grep '^linkpass_' "$f")
  echo "$(basename "$f"): $n samples, all in the scrape; promtool accepts it"
done
[ "$(grep -c '^linkpass_up{.*} 0$' "$tmp/lp")" -eq 2 ] || fail "the exited processes do not say linkpass_up 0"

jq -e '.panels | length > 0' "$dashboard" >/dev/null || fail "$dashboard is not a Grafana dashboard JSON"
while read -r series; do
  grep -q "^# TYPE $series " "$tmp/scrape" || fail "the dashboard queries $series, which the plugin does not write"
done < <(jq -r '.. | .expr? // empty' "$dashboard" | grep -o 'linkpass_[a-z_]*' | sort -u)
echo "PASS scrape: node exporter served every sample, promtool accepts the files, the dashboard's series exist"
