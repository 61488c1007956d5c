# Bounded polling and the reads it polls, for the suite's shell tests and
# benchmarks.  Sourced.  wait_until needs the sourcing script's fail() and
# its variable perf: the driver's PID, or empty while there is none.

# wait_until SECONDS WHAT CMD...: run CMD every 50 ms until it succeeds.
# Fails with "WHAT: not within SECONDS s", or at once with "WHAT: the
# driver ended first" when the driver has exited and CMD still fails (its
# output is complete: waiting longer cannot help).  A CMD may leave what it
# last saw in poll_saw, and the failure says it.
wait_until() {
  local secs=$1 what=$2 deadline
  shift 2
  poll_saw=""
  deadline=$((SECONDS + secs))
  until "$@"; do
    if [ -n "${perf:-}" ] && ! kill -0 "$perf" 2>/dev/null; then
      "$@" && return 0
      fail "$what: the driver ended first${poll_saw:+ ($poll_saw)}"
    fi
    ((SECONDS < deadline)) || fail "$what: not within ${secs} s${poll_saw:+ ($poll_saw)}"
    sleep 0.05
  done
}

has_line() { grep -qE -- "$1" "$2" 2>/dev/null; }

# count_lines PATTERN FILE: 0 too while the file does not exist yet.
count_lines() {
  local n
  n=$(grep -cE -- "$1" "$2" 2>/dev/null) || true
  echo "${n:-0}"
}

at_least() { (($(count_lines "$1" "$2") >= $3)); }

# prom_sum NAME FILE...: the sum of every sample of metric NAME in
# Prometheus text files (LINKPASS_METRICS_FILE); 0 while none exists yet.
prom_sum() {
  local name=$1 f files=()
  shift
  for f in "$@"; do [ -e "$f" ] && files+=("$f"); done # awk stops at a missing one
  ((${#files[@]})) || { echo 0; return; }
  awk -v n="$name{" 'index($1, n) == 1 { s += $2 } END { print s + 0 }' "${files[@]}" 2>/dev/null || echo 0
}
