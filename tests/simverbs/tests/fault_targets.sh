#!/usr/bin/env bash
# `simverbs fault` on several ports at once: every target is checked before
# any is touched, then all get the fault in one pass (a test of "every port
# alike" must not meet one port faulty before the others).
# usage: fault_targets.sh CONFIG (a host node0 with mlx5_0..mlx5_3)
source "$(dirname "$0")/lib.sh"
sv_up "$1"
all=node0:mlx5_0,node0:mlx5_1,node0:mlx5_2,node0:mlx5_3
lossy() { "$SIMVERBS" status | grep -c 'faults: loss 1.0000%' || true; }
# One bad name in the list: an error naming it, and no port changed.
if err=$("$SIMVERBS" fault node0:mlx5_0,node0:mlx5_9 loss 1 2>&1); then fail "a list with an unknown nic was accepted"; fi
grep -q "has no nic 'mlx5_9'" <<<"$err" || fail "the error does not name the unknown nic: $err"
(($(lossy) == 0)) || fail "a rejected list still set the fault on $(lossy) port(s)"
out=$("$SIMVERBS" fault "$all" loss 1) || fail "fault on four ports failed: $out"
(($(grep -c 'loss 1.0000%' <<<"$out") == 4)) || fail "not every port said its fault: $out"
(($(lossy) == 4)) || fail "$(lossy) of 4 ports lose packets"
"$SIMVERBS" fault "$all" clear >/dev/null || fail "clear on four ports failed"
(($(lossy) == 0)) || fail "$(lossy) ports still lose packets after clear"
echo "PASS"
