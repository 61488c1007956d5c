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
sv_run() {
  local host=$1
  shift
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
# ready before their clients connect.
wait_listen() {
  local deadline=$((SECONDS + ${2:-20}))
  until ss -Hltn "sport = :$1" | grep -q .; do
    ((SECONDS < deadline)) || { echo "nothing listens on port $1 after ${2:-20}s" >&2; return 1; }
    sleep 0.05
  done
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
