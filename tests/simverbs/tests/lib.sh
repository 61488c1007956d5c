# Shared by the simverbs integration tests: a private fabric per test, torn
# down (with every process the test started) however the test ends.
# Needs SIMVERBS (path of the tool) in the environment.  With SV_NETNS=1 the
# fabric is namespace-backed (`simverbs up --netns`), and the test is skipped
# (exit 77) where network namespaces cannot be made.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
. "$(dirname "${BASH_SOURCE[0]}")/../../lib/poll.sh"  # wait_until (no driver to watch: perf is empty)
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

sv_up() {
  local opts=()
  if [ "${SV_NETNS:-0}" = 1 ]; then
    sv_require_netns
    opts=(--netns)
  fi
  "$SIMVERBS" up "$1" "${opts[@]}" --fabric "$FABRIC" >/dev/null
}

# ctest counts exit status 77 as skipped (SKIP_RETURN_CODE).
skip() {
  echo "SKIP: $*"
  exit 77
}

# Namespace-backed fabrics need root, iproute2, and veth and bridge support:
# try them on a throwaway namespace, and skip the test when they fail.
sv_require_netns() {
  local probe="sv-probe-$$-$RANDOM" err
  [ "$(id -u)" = 0 ] || skip "network namespaces need root (this runs as uid $(id -u))"
  command -v ip >/dev/null || skip "iproute2's ip is not installed"
  err=$(ip netns add "$probe" 2>&1) || skip "cannot create a network namespace: $err"
  err=$(ip -n "$probe" link add sv-probe-a type veth peer name sv-probe-b 2>&1 &&
    ip -n "$probe" link add sv-probe-br type bridge 2>&1) || {
    ip netns delete "$probe"
    skip "cannot create veth or bridge interfaces: $err"
  }
  ip netns delete "$probe"
}

# In a sanitizer build the simulated library is instrumented, so Debian's
# uninstrumented programs must load the sanitizer runtimes first (SV_PRELOAD);
# their own leaks are not ours to report.  Sets SV_CMD to the command line
# that runs "$@" on host $1.
sv_cmd() {
  local host=$1
  shift
  if [ -n "${SV_PRELOAD:-}" ]; then
    set -- env LD_PRELOAD="$SV_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$@"
  fi
  SV_CMD=("$SIMVERBS" run --host "$host" --fabric "$FABRIC" -- "$@")
}
sv_run() {
  sv_cmd "$@"
  "${SV_CMD[@]}"
}
# Start a background command on a host; sv_cleanup kills it.  No shell sits
# in between (simverbs run execs the program), so SV_LAST is the program.
sv_spawn() {
  local out=$1
  shift
  sv_cmd "$@"
  "${SV_CMD[@]}" >"$out" 2>&1 &
  SV_PIDS+=($!)
  SV_LAST=$!
}

# A TCP port nobody listens on, so parallel tests never collide.
free_port() {
  local p
  while :; do
    # Below Linux's ephemeral range (32768-60999 by default), which the
    # connections and port-0 listeners of tests running alongside draw
    # from; and no socket at all on it, not only no listener.
    p=$((10000 + RANDOM % 20000))
    ss -Htan "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
}

# Something listens on TCP port $1, seen from host $2 (none: from here).
# On a netns fabric only the host's own namespace shows its listeners.
listening() {
  if [ -n "${2:-}" ]; then
    "$SIMVERBS" run --host "$2" --fabric "$FABRIC" -- ss -Hltn "sport = :$1" | grep -q .
  else
    ss -Hltn "sport = :$1" | grep -q .
  fi
}

# Poll (bounded) until something listens on TCP port $1: servers must be
# ready before their clients connect.  $2: the server's pid, $3: its output,
# $4 (optional): the server's host.
wait_listen() {
  local deadline=$((SECONDS + 20))
  until listening "$1" "${4:-}"; do
    kill -0 "$2" 2>/dev/null || fail "the server exited before listening: $(cat "$3")"
    ((SECONDS < deadline)) || fail "nothing listens on port $1 after 20s: $(cat "$3")"
    sleep 0.05
  done
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

