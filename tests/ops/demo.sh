#!/usr/bin/env bash
# The README's main job, as a user runs it: scripts/demo.sh, shortened.
# It must pass (exit 0, "== PASS", every element right), show failover and
# failback lines under the cable actions they follow, count its pulls, and
# leave no namespace of its fabric behind.  Root only (network namespaces):
# skipped (77) elsewhere.
#   demo.sh REPO_ROOT
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
top=${1:?usage: demo.sh REPO_ROOT}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
fabric=ctdemo$$ # its own: another run of the suite may be beside it
out=$(mktemp /tmp/lp-demo-test.XXXXXX)
trap 'rm -f "$out"' EXIT
fail() {
  echo "FAIL: $*" >&2
  tail -n 60 "$out" >&2
  exit 1
}

# 10 s of all_reduce, a cable out for 2 s every 3.5 s: two pulls, two plugs.
LINKPASS_FAILBACK_HOLDDOWN_MS=500 timeout 170 bash "$top/scripts/demo.sh" --duration 10 --flap-every 3.5 \
  --down-for 2 --ranks 2 --size 1M --fabric "$fabric" >"$out" 2>&1
rc=$?
((rc == 0)) || fail "scripts/demo.sh exited with $rc"
grep -q '^== PASS: every element of every iteration was right through [1-9][0-9]* cable pulls' "$out" ||
  fail "no PASS line"
grep -Eq '^ +data errors +0 OK$' "$out" || fail "the summary does not say 0 data errors"
pulls=$(sed -n 's/^ *cables pulled *\([0-9]*\) .*/\1/p' "$out")
((${pulls:-0} >= 2)) || fail "the summary counts ${pulls:-no} pulls, not 2 or more"
grep -Eq '^ +[0-9.]+ s  pulled node[0-9] ib[0-9]: [1-9][0-9]* lines?$' "$out" || fail "no line grouped under a pull"
grep -q 'event=failover .* time=' "$out" || fail "no failover line (with its time=) shown"
grep -q 'event=failback ' "$out" || fail "no failback line shown"
ip netns list | grep -q "sv-$fabric-" && fail "namespaces of fabric $fabric left behind: $(ip netns list | grep "sv-$fabric-")"
echo "PASS demo: $pulls pulls, $(grep -c 'event=failover' "$out") failover and $(grep -c 'event=failback' "$out") failback lines"
