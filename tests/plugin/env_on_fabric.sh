#!/usr/bin/env bash
# NCCL_IB_* variables that change what the QPs look like, checked on a
# simulated RoCE fabric from `simverbs status` while a sendrecv runs.
#   usage: env_on_fabric.sh CASE      (env: SIMVERBS PERF PLUGIN CONFS)
#   fifo_tc  NCCL_IB_TC=32 NCCL_IB_FIFO_TC=106: senders' QPs tc 32, receivers' tc 106
#   tc_only  NCCL_IB_TC=32 alone: every QP tc 32
#   bad      NCCL_IB_FIFO_TC=300: a WARN naming it, and every QP tc 32
#   gid_inet6     NCCL_IB_ADDR_FAMILY=AF_INET6: the automatic GID is the IPv6 one (index 1)
#   gid_range     NCCL_IB_ADDR_RANGE=198.18.0.0/16: the IPv4-mapped RoCE v2 GID (index 3)
#   gid_no_match  NCCL_IB_ADDR_RANGE=10.0.0.0/8: a WARN per port, and the choice without it
#   inline        NCCL_IB_USE_INLINE=1: clear-to-sends inline, from the receivers' QPs only
#   ece           node1's mlx5_0 offers ECE 0x10000002, the rest 0x30000002: both ends of
#                 every mlx5_0 QP agree on 0x10000002, mlx5_1 QPs keep 0x30000002
#   ece_off       NCCL_IB_ECE_ENABLE=0: every QP keeps its device's own options
#   pci_order     mlx5_1 has the lower PCI address: it is device 0
#   pci_order_off NCCL_IB_DEVICE_PCI_ORDER=0: libibverbs order, mlx5_0 is device 0
#   ar            InfiniBand with adaptive routing, 64 KiB messages: plain WRITEs, out of order
#   ar_off        NCCL_IB_ADAPTIVE_ROUTING=0: one WRITE_WITH_IMM each, nothing out of order
#   ar_threshold  NCCL_IB_AR_THRESHOLD=1M: 64 KiB messages are not split
#   ro            the default NCCL_IB_PCI_RELAXED_ORDERING=2: data registrations relaxed
#   ro_off        NCCL_IB_PCI_RELAXED_ORDERING=0: none
#   subnet        node1's NICs on each other's subnets; NCCL_IB_SUBNET_AWARE_ROUTING=1:
#                 each rank connects from its mlx5_1, the NIC on the listener's (mlx5_0) subnet
#   subnet_off    the same fabric without it: every connection from mlx5_0
# (every run checks the data it moved: linkpass-perf -c 1)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
. "$(dirname "${BASH_SOURCE[0]}")/../lib/poll.sh"  # wait_until, has_line
case_=${1:?usage: env_on_fabric.sh fifo_tc|tc_only|bad|gid_*|inline|ece|ece_off|pci_order|pci_order_off|ar|ar_off|ar_threshold|ro|ro_off}
: "${SIMVERBS:?}" "${PERF:?}" "${PLUGIN:?}" "${CONFS:?}"
tmp=$(mktemp -d /tmp/lpenv.XXXXXX)
# A rate board of its own: the host's default one is shared with every
# test ctest runs beside it, on fabrics whose NICs have the same GUIDs
# (tests/failover/scenario.sh).
export LINKPASS_RATE_BOARD="$tmp/rates"
export SIMVERBS_FABRIC="env$$"
perf=""
cleanup() {
  [ -n "$perf" ] && kill "$perf" 2>/dev/null && wait "$perf" 2>/dev/null
  "$SIMVERBS" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL ($case_): $*" >&2
  cat "$tmp/out" >&2 2>/dev/null || true
  exit 1
}
export NCCL_IB_TC=32 NCCL_DEBUG=WARN
conf=$CONFS/two-hosts-roce.conf
size=8K
# A fabric file derived from a shipped one by a sed program.
derived() { sed "$2" "$CONFS/$1" >"$tmp/fabric.conf" && conf=$tmp/fabric.conf; }
case $case_ in
fifo_tc) export NCCL_IB_FIFO_TC=106 ;;
tc_only) unset NCCL_IB_FIFO_TC ;;
bad) export NCCL_IB_FIFO_TC=300 ;;
gid_inet6) export NCCL_IB_ADDR_FAMILY=AF_INET6 NCCL_DEBUG=INFO ;;
gid_range) export NCCL_IB_ADDR_RANGE=198.18.0.0/16 NCCL_DEBUG=INFO ;;
gid_no_match) export NCCL_IB_ADDR_RANGE=10.0.0.0/8 NCCL_DEBUG=INFO ;;
inline) export NCCL_IB_USE_INLINE=1 NCCL_IB_FIFO_TC=106 ;;
ece | ece_off) derived two-hosts-roce.conf '/^host node1/,$ s/^nic mlx5_0 .*/& ece=0x10000002/' ;;&
ece_off) export NCCL_IB_ECE_ENABLE=0 ;;
pci_order | pci_order_off)
  derived two-hosts-roce.conf 's/pci=0000:17:00.0/pci=0000:c3:00.0/'
  export NCCL_DEBUG=INFO
  ;;&
pci_order_off) export NCCL_IB_DEVICE_PCI_ORDER=0 ;;
ar | ar_off | ar_threshold)
  derived two-hosts-ib.conf 's/^link ib$/&\nadaptive_routing on/'
  export NCCL_IB_PCI_RELAXED_ORDERING=0 # relaxed ordering would place writes out of order too
  size=64K
  ;;&
ar_off) export NCCL_IB_ADAPTIVE_ROUTING=0 ;;
ar_threshold) export NCCL_IB_AR_THRESHOLD=1048576 ;;
ro_off) export NCCL_IB_PCI_RELAXED_ORDERING=0 ;;
subnet | subnet_off)
  derived two-hosts-roce.conf '/^host node1/,$ { s/ip=198.18.0.2/ip=198.18.9.2/; s/ip=198.18.1.2/ip=198.18.0.2/; s/ip=198.18.9.2/ip=198.18.1.2/ }'
  export NCCL_DEBUG=INFO
  ;;&
subnet) export NCCL_IB_SUBNET_AWARE_ROUTING=1 ;;
ece | pci_order | ar | ro | subnet_off) ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
"$SIMVERBS" up "$conf" >/dev/null
# The driver runs far longer than the waits below (it is killed once they
# are over), so that a slow machine fails them with their own message.
"$PERF" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$PLUGIN" --op sendrecv -b "$size" -e "$size" \
  --duration 130 --timeout 170 >"$tmp/out" 2>&1 &
perf=$!
# The connections are up once the first per-second line is out (bounded
# in time, not in looks: a look is slow on a loaded machine).  60 s: in CI
# (2026-12-05) this wait once gave up at 30 s with 22 per-second lines
# already in the file (why the look missed them was not found).
wait_until 60 "the driver's first second of traffic" has_line '^ +1\.0 ' "$tmp/out"
# Each connection end's standby path (LINKPASS_STANDBY) is connected a
# moment later: wait (bounded, well inside the run) until all 8 QPs are in
# RTS, main and standby.
# (Each look bounded: one status seen to take seconds on a loaded CI machine
# must not eat the whole wait.)
looks=0 slow=0
in_rts() { awk '$1 == "qp" && $5 == "RTS"' "$tmp/status" 2>/dev/null | wc -l; }
rts() {
  local t0=${EPOCHREALTIME/./}
  looks=$((looks + 1))
  timeout 10 "$SIMVERBS" status >"$tmp/status.new" && mv "$tmp/status.new" "$tmp/status"
  local rc=$?
  ((${EPOCHREALTIME/./} - t0 < 2000000)) || slow=$((slow + 1))
  ((rc == 0)) && (($(in_rts) >= 8)) && return
  poll_saw=$(why_not_rts)
  return 1
}
why_not_rts() {
  echo "$(in_rts) of 8 QPs in RTS after $looks looks ($slow of them took 2 s or more): $(cat "$tmp/status" 2>/dev/null)"
}
wait_until 45 "the standby paths all connected" rts
"$SIMVERBS" status >"$tmp/status"
kill "$perf" 2>/dev/null || true
wait "$perf" 2>/dev/null || true
perf=""
# the per-second lines' last column counts wrong elements
wrong=$(awk '$1 ~ /^[0-9]+\.[0-9]$/ { s += $5 } END { print s + 0 }' "$tmp/out")
((wrong == 0)) || fail "$wrong wrong elements"
# A field of the RTS QP lines: "<qp name> <value of field>" per QP.
qp_field() { awk -v f="$1" '$1 == "qp" && $5 == "RTS" { for (i = 6; i < NF; i++) if ($i == f) print $4, $(i + 1) }' "$tmp/status"; }
sum_field() { qp_field "$1" | awk '{ s += $2 } END { print s + 0 }'; }
case $case_ in
inline)
  (($(sum_field inl) > 0)) || fail "no clear-to-send went inline: $(cat "$tmp/status")"
  # only the receivers' QPs (NCCL_IB_FIFO_TC: tc 106) post inline
  bad=$(awk '$1 == "qp" && $5 == "RTS" { tc = inl = ""; for (i = 6; i < NF; i++) { if ($i == "tc") tc = $(i + 1); if ($i == "inl") inl = $(i + 1) } if (inl > 0 && tc != 106) print }' "$tmp/status")
  [ -z "$bad" ] || fail "a sender's QP posted inline: $bad"
  echo "PASS $case_"; exit 0
  ;;
ece | ece_off)
  want0=0x10000002 want1=0x30000002
  while read -r qp ece; do
    case $qp in
    *:mlx5_1:1) [ "$ece" = 0x30000002 ] || fail "$qp: ECE $ece, expected 0x30000002" ;;
    node1:mlx5_0:1) [ "$ece" = 0x10000002 ] || fail "$qp: ECE $ece, expected 0x10000002" ;;
    node0:mlx5_0:1)
      w=$want0
      [ "$case_" = ece_off ] && w=$want1
      [ "$ece" = "$w" ] || fail "$qp: ECE $ece, expected $w"
      ;;
    esac
  done < <(qp_field ece)
  (($(qp_field ece | wc -l) >= 8)) || fail "expected an ECE value on 8 QPs: $(cat "$tmp/status")"
  echo "PASS $case_"; exit 0
  ;;
pci_order | pci_order_off)
  first=mlx5_1
  [ "$case_" = pci_order_off ] && first=mlx5_0
  n=$(grep -c "device 0: $first:1 " "$tmp/out" || true)
  ((n == 2)) || fail "expected device 0 to be $first on both ranks, found it on $n"
  echo "PASS $case_"; exit 0
  ;;
ar | ar_off | ar_threshold)
  ooo=$(sum_field ooo)
  if [ "$case_" = ar ]; then
    ((ooo > 0)) || fail "no write landed out of order: the messages were not split into plain WRITEs"
  else
    ((ooo == 0)) || fail "$ooo writes out of order: messages were split"
  fi
  echo "PASS $case_ ($ooo writes out of order)"; exit 0
  ;;
subnet | subnet_off)
  # the QPs that carry data or clear-to-sends, by device
  on1=$(qp_field req | awk '$2 > 0 && $1 ~ /:mlx5_1:1$/' | wc -l)
  if [ "$case_" = subnet ]; then
    # the listeners stay on NCCL's mlx5_0; each connector moves to its mlx5_1
    ((on1 == 2)) || fail "expected the two sending ends on mlx5_1, found $on1 busy QPs there"
    n=$(grep -c "NCCL_IB_SUBNET_AWARE_ROUTING: connecting from mlx5_1:1" "$tmp/out" || true)
    ((n == 2)) || fail "expected each rank to say it connects from mlx5_1, $n did"
  else
    ((on1 == 0)) || fail "$on1 busy QPs on mlx5_1 without NCCL_IB_SUBNET_AWARE_ROUTING"
  fi
  echo "PASS $case_"; exit 0
  ;;
ro | ro_off)
  ro=$(awk '$1 == "pid" { gsub(/[(]/, "", $(NF - 1)); s += $(NF - 1) } END { print s + 0 }' "$tmp/status")
  if [ "$case_" = ro ]; then
    ((ro > 0)) || fail "no relaxed-ordering registration: $(grep '^  pid' "$tmp/status")"
  else
    ((ro == 0)) || fail "$ro relaxed-ordering registrations with NCCL_IB_PCI_RELAXED_ORDERING=0"
  fi
  echo "PASS $case_ ($ro relaxed-ordering registrations)"; exit 0
  ;;
esac
# The GID each rank chose for its mlx5_0 (simverbs' RoCE table: [0] fe80 v1,
# [1] fe80 v2, [2] IPv4-mapped v1, [3] IPv4-mapped v2), and traffic flowed.
gid_is() {
  local n
  n=$(grep -cE "device 0: mlx5_0:1 RoCE .*GID index $1 \($2" "$tmp/out" || true)
  ((n == 2)) || fail "expected both ranks on GID index $1 ($2...), found $n"
}
case $case_ in
gid_inet6) gid_is 1 fe80:: ;;
gid_range) gid_is 3 ::ffff:198\.18\. ;;
gid_no_match)
  gid_is 3 ::ffff:198\.18\.
  grep -q "NCCL_IB_ADDR_RANGE=10.0.0.0/8 matches no GID of mlx5_0:1; choosing among all of them" "$tmp/out" ||
    fail "no warning that the range matches nothing"
  ;;
esac
case $case_ in gid_*) echo "PASS $case_"; exit 0 ;; esac
(($(sum_field inl) == 0)) || fail "inline posts without NCCL_IB_USE_INLINE"
tcs=$(qp_field tc | awk '{ print $2 }' | sort | uniq -c)
echo "$tcs"
n32=$(awk '$2 == 32 { print $1 }' <<<"$tcs")
n106=$(awk '$2 == 106 { print $1 }' <<<"$tcs")
others=$(awk '$2 != 32 && $2 != 106' <<<"$tcs")
[ -z "$others" ] || fail "QPs with an unexpected traffic class: $others"
# sendrecv on 2 ranks: each rank has one send and one receive connection,
# one QP each on its path and one on its standby path
case $case_ in
fifo_tc) [ "${n32:-0}" = 4 ] && [ "${n106:-0}" = 4 ] || fail "expected 4 QPs at tc 32 and 4 at tc 106" ;;
tc_only | bad) [ "${n32:-0}" = 8 ] && [ -z "$n106" ] || fail "expected 8 QPs at tc 32" ;;
esac
if [ "$case_" = bad ]; then
  grep -q 'NCCL_IB_FIFO_TC="300" is not valid: expected an integer in \[-1, 255\]' "$tmp/out" ||
    fail "no warning naming NCCL_IB_FIFO_TC, its value and the accepted range"
fi
echo "PASS $case_"
