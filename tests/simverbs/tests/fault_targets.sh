#!/usr/bin/env bash
# `simverbs fault` and `simverbs link` on several ports at once: every
# target is checked before any is touched, then all get the fault, or change
# state, in one pass (a test of "every port alike" must not meet one port
# faulty before the others; a switch fails both ends' links at once).
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

down() { "$SIMVERBS" status | grep -cE '^ +port [0-9]+ +DOWN ' || true; }
if err=$("$SIMVERBS" link node0:mlx5_0,node0:mlx5_9 down 2>&1); then fail "a link list with an unknown nic was accepted"; fi
grep -q "has no nic 'mlx5_9'" <<<"$err" || fail "the error does not name the unknown nic: $err"
(($(down) == 0)) || fail "a rejected list still took $(down) port(s) down"
out=$("$SIMVERBS" link "$all" down) || fail "link down on four ports failed: $out"
# Each line says when its port changed, on the wall clock, within this call.
(($(grep -cE '^node0:mlx5_[0-3]:1 down at [0-9]+\.[0-9]{6}$' <<<"$out") == 4)) || fail "not every port said when it went down: $out"
(($(down) == 4)) || fail "$(down) of 4 ports are down"
"$SIMVERBS" link "$all" up >/dev/null || fail "link up on four ports failed"
(($(down) == 0)) || fail "$(down) ports are still down"
echo "PASS"
