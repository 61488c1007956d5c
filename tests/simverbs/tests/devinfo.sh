#!/usr/bin/env bash
# Debian's ibv_devinfo lists the simulated devices of the chosen host only.
# usage: devinfo.sh CONFIG
source "$(dirname "$0")/lib.sh"
sv_up "$1"
out=$(sv_run node1 ibv_devinfo -v) || fail "ibv_devinfo failed: $out"
echo "$out"
[ "$(grep -c '^hca_id:' <<<"$out")" = 2 ] || fail "expected the 2 devices of node1"
grep -q 'state:.*PORT_ACTIVE (4)' <<<"$out" || fail "no active port"
grep -q 'link_layer:.*InfiniBand' <<<"$out" || fail "no InfiniBand link layer"
grep -qE 'sm_lid:[[:space:]]+1' <<<"$out" || fail "no subnet manager LID"
# A pulled link shows as down to the same program.
"$SIMVERBS" link node1:mlx5_1:1 down >/dev/null || fail "link down failed"
out=$(sv_run node1 ibv_devinfo -d mlx5_1) || fail "ibv_devinfo -d failed: $out"
grep -q 'state:.*PORT_DOWN (1)' <<<"$out" || fail "pulled link not shown down: $out"
echo "PASS"
