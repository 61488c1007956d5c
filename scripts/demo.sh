#!/usr/bin/env bash
# The main job: set up, build, bring up a two-host simulated RDMA fabric and
# run perftest's ib_write_bw across it, then tear everything down.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/setup.sh"
dir=$(bash "$here/build.sh")
sv="$dir/simverbs/simverbs"
export SIMVERBS_FABRIC="demo$$"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null
  "$sv" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$sv" up "$here/../tests/simverbs/configs/two-hosts-ib.conf"
port=$((20000 + RANDOM % 30000))
"$sv" run --host node0 -- ib_write_bw -d mlx5_0 -p "$port" -F -a >/dev/null 2>&1 &
server=$!
for _ in $(seq 200); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.05; done
echo "ib_write_bw from node1 to node0 over the simulated fabric:"
"$sv" run --host node1 -- ib_write_bw -d mlx5_0 -p "$port" -F -a 127.0.0.1
wait "$server"
server=""
"$sv" status
