# Shared by the simverbs integration tests: a private fabric per test, torn
# down (with every process the test started) however the test ends.
# Needs SIMVERBS (path of the tool) in the environment.
set -euo pipefail
: "${SIMVERBS:?SIMVERBS must name the simverbs tool}"
FABRIC="t$$r$RANDOM"
export SIMVERBS_FABRIC=$FABRIC
SV_PIDS=()

sv_cleanup() {
  local pid
  for pid in "${SV_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$SIMVERBS" down --fabric "$FABRIC" >/dev/null 2>&1 || true
}
trap sv_cleanup EXIT

sv_up() { "$SIMVERBS" up "$1" --fabric "$FABRIC" >/dev/null; }
# In a sanitizer build the simulated library is instrumented, so Debian's
# uninstrumented programs must load the sanitizer runtimes first (SV_PRELOAD);
# their own leaks are not ours to report.
sv_run() {
  local host=$1
  shift
  if [ -n "${SV_PRELOAD:-}" ]; then
    set -- env LD_PRELOAD="$SV_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$@"
  fi
  "$SIMVERBS" run --host "$host" --fabric "$FABRIC" -- "$@"
}
# Start a background command on a host; its pid is reaped by sv_cleanup.
sv_spawn() {
  local out=$1
  shift
  sv_run "$@" >"$out" 2>&1 &
  SV_PIDS+=($!)
  SV_LAST=$!
}

# A TCP port nobody listens on, so parallel tests never collide.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    ss -Hltn "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
}

# Poll (bounded) until something listens on TCP port $1: servers must be
# ready before their clients connect.  $2: the server's pid, $3: its output.
wait_listen() {
  local deadline=$((SECONDS + 20))
  until ss -Hltn "sport = :$1" | grep -q .; do
    kill -0 "$2" 2>/dev/null || fail "the server exited before listening: $(cat "$3")"
    ((SECONDS < deadline)) || fail "nothing listens on port $1 after 20s: $(cat "$3")"
    sleep 0.05
  done
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
