#!/usr/bin/env bash
# Run one harness scenario as two processes on a private simulated fabric.
#   run_pair.sh SIMVERBS HARNESS PLUGIN CONFIG SCENARIO [ABI]
# The fabric, the FIFOs and every process started here are removed however
# the test ends (the trap), so a failing test leaves nothing in /dev/shm.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
SIMVERBS=$1 HARNESS=$2 PLUGIN=$3 CONFIG=$4 SCENARIO=$5 ABI=${6:-}
FABRIC="lpt$$r${RANDOM}"
TMP=$(mktemp -d /tmp/linkpass-test.XXXXXX)
# A rate board of its own: the host's default one is shared with every
# test ctest runs beside it, on fabrics whose NICs have the same GUIDs
# (tests/failover/scenario.sh).
export LINKPASS_RATE_BOARD="$TMP/rates"
PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$SIMVERBS" down --fabric "$FABRIC" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

"$SIMVERBS" up "$CONFIG" --fabric "$FABRIC" >/dev/null || { echo "FAIL: simverbs up $CONFIG" >&2; exit 1; }
mkfifo "$TMP/h" "$TMP/b"
export LP_HARNESS_PLUGIN=$PLUGIN LP_HARNESS_SIMVERBS=$SIMVERBS SIMVERBS_FABRIC=$FABRIC
[ -n "$ABI" ] && export LP_HARNESS_ABI=$ABI
# The receiver plays node0, the sender node1.
"$SIMVERBS" run --host node0 --fabric "$FABRIC" -- "$HARNESS" recv "$SCENARIO" "$TMP" >"$TMP/recv.log" 2>&1 &
PIDS+=($!)
RECV=$!
"$SIMVERBS" run --host node1 --fabric "$FABRIC" -- "$HARNESS" send "$SCENARIO" "$TMP" >"$TMP/send.log" 2>&1 &
PIDS+=($!)
SEND=$!
wait "$SEND"; rs=$?
wait "$RECV"; rr=$?
echo "--- receiver (exit $rr)"; cat "$TMP/recv.log"
echo "--- sender (exit $rs)"; cat "$TMP/send.log"
if [ "$rr" -ne 0 ] || [ "$rs" -ne 0 ]; then
  echo "FAIL: $SCENARIO${ABI:+ (ABI v$ABI)} on $(basename "$CONFIG")" >&2
  exit 1
fi
echo "PASS: $SCENARIO${ABI:+ (ABI v$ABI)} on $(basename "$CONFIG")"
