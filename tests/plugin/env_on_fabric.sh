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
set -euo pipefail
case_=${1:?usage: env_on_fabric.sh fifo_tc|tc_only|bad|gid_inet6|gid_range|gid_no_match}
: "${SIMVERBS:?}" "${PERF:?}" "${PLUGIN:?}" "${CONFS:?}"
tmp=$(mktemp -d /tmp/lpenv.XXXXXX)
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
case $case_ in
fifo_tc) export NCCL_IB_FIFO_TC=106 ;;
tc_only) unset NCCL_IB_FIFO_TC ;;
bad) export NCCL_IB_FIFO_TC=300 ;;
gid_inet6) export NCCL_IB_ADDR_FAMILY=AF_INET6 NCCL_DEBUG=INFO ;;
gid_range) export NCCL_IB_ADDR_RANGE=198.18.0.0/16 NCCL_DEBUG=INFO ;;
gid_no_match) export NCCL_IB_ADDR_RANGE=10.0.0.0/8 NCCL_DEBUG=INFO ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
"$SIMVERBS" up "$CONFS/two-hosts-roce.conf" >/dev/null
"$PERF" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --plugin "$PLUGIN" --op sendrecv -b 8K -e 8K \
  --duration 40 --timeout 90 >"$tmp/out" 2>&1 &
perf=$!
# The connections are up once the first per-second line is out (bounded).
for _ in $(seq 600); do
  grep -qE '^ +1\.0 ' "$tmp/out" && break
  kill -0 "$perf" 2>/dev/null || fail "the driver ended early"
  sleep 0.05
done
grep -qE '^ +1\.0 ' "$tmp/out" || fail "no traffic within 30 s"
# Each connection end's standby path (LINKPASS_STANDBY) is connected a
# moment later: wait (bounded, well inside the run) until all 8 QPs are in
# RTS, main and standby.
rts() { "$SIMVERBS" status >"$tmp/status" && (($(awk '$1 == "qp" && $5 == "RTS"' "$tmp/status" | wc -l) >= 8)); }
deadline=$((SECONDS + 30))
until rts; do
  ((SECONDS < deadline)) || fail "the standby paths were not all connected within 30 s: $(cat "$tmp/status")"
  kill -0 "$perf" 2>/dev/null || fail "the driver ended early"
  sleep 0.05
done
kill "$perf" 2>/dev/null || true
wait "$perf" 2>/dev/null || true
perf=""
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
tcs=$(awk '$1 == "qp" && $5 == "RTS" { for (i = 6; i < NF; i++) if ($i == "tc") print $(i + 1) }' "$tmp/status" | sort | uniq -c)
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
