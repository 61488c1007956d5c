#!/usr/bin/env bash
# Run linkpass-perf on a private simulated fabric that is always torn down,
# and insist on a clean table: exit 0, every row #wrong 0, the OK footer.
#
# usage: on_fabric.sh SIMVERBS CONFIG LINKPASS-PERF [ARGS...]
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
simverbs=$1 conf=$2 perf=$3
shift 3
fabric="bench$$r$RANDOM"
out=$(mktemp /tmp/linkpass-perf.XXXXXX)
export LINKPASS_RATE_BOARD="$out.rates" # its own: not the host's, which the tests beside it share
cleanup() {
  "$simverbs" down --fabric "$fabric" >/dev/null 2>&1 || true
  rm -f "$out" "$out.rates"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! "$simverbs" up "$conf" --fabric "$fabric" >/dev/null; then
  echo "on_fabric.sh: simverbs up $conf failed" >&2
  exit 2
fi
echo "+ $perf --fabric $fabric $*"
"$perf" --fabric "$fabric" --simverbs "$simverbs" "$@" | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then
  # belt and braces: the driver's own verdict must match its table
  if awk '!/^#/ && NF >= 9 && $9 != "0" { bad = 1 } END { exit !bad }' "$out"; then
    echo "on_fabric.sh: a row reports #wrong != 0 but the exit code is 0" >&2
    rc=1
  elif ! grep -q "Out of bounds values : 0 OK" "$out"; then
    echo "on_fabric.sh: no 'Out of bounds values : 0 OK' footer" >&2
    rc=1
  fi
fi
exit "$rc"
