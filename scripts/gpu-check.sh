#!/usr/bin/env bash
# Real NCCL on a real NVIDIA GPU, through linkpass on the simulated fabric,
# beside NCCL's own IB transport (docs/GPU-CHECK.md).
#
# Two ranks of nccl-smoke (bench/nccl_smoke.c) share GPU 0, each under
# `simverbs run` as its own simulated host of
# tests/simverbs/configs/two-hosts-4nic.conf:
#   (a) checked all_reduce and sendrecv, 8 B .. 256 MiB, through linkpass;
#   (b) proof from NCCL's own INFO lines that NCCL loaded and used linkpass,
#       and that the verbs library loaded is simverbs';
#   (c) 64 MiB all_reduce for 20 s while node0's busy NIC (mlx5_0 when it
#       carries traffic) is pulled for 5 s: #wrong 0 and a failover line;
#   (d) the same runs with NCCL's built-in IB transport (a failed flap run
#       there is a result, not a failure of this script).
#
# usage: scripts/gpu-check.sh [--no-build]
#   --no-build  use the tree already built in build/ (or $GPU_CHECK_BUILD_DIR)
# environment:
#   CUDA_HOME            CUDA 13 with NCCL 2.28.9 (default /usr/local/cuda-13.0)
#   OUT                  the directory for the logs (default: a new /tmp/gpu-check.XXXX)
#   GPU_CHECK_BUILD_DIR  an already built tree to use; nothing is built
#   GPU_CHECK_BUDGET     seconds the whole check may take (default 450)
#   GPU_CHECK_MAX_BYTES  the sweeps' largest size (default 256M)
#   GPU_CHECK_FLAP_SECS  the flap runs' length in seconds (default 20)
# exit: 0 every linkpass check passed; 1 a check failed or the setup is
#       broken (the summary says which); 2 no NVIDIA GPU is visible (nothing
#       was run); 64 a usage error
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0}
budget=${GPU_CHECK_BUDGET:-450}
max_bytes=${GPU_CHECK_MAX_BYTES:-256M}
flap_secs=${GPU_CHECK_FLAP_SECS:-20}
build_dir=${GPU_CHECK_BUILD_DIR:-}
no_build=0
while (($#)); do
  case $1 in
  --no-build) no_build=1 ;;
  -h | --help)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "gpu-check: unknown argument '$1' (see --help)" >&2
    exit 64
    ;;
  esac
  shift
done
if ((no_build)) && [ -z "$build_dir" ]; then build_dir=$top/build; fi
start=$SECONDS

if [ -n "${OUT:-}" ]; then
  out=$OUT
  mkdir -p "$out" || { echo "gpu-check: cannot create OUT=$out" >&2; exit 1; }
else
  out=$(mktemp -d /tmp/gpu-check.XXXX) || { echo "gpu-check: mktemp failed" >&2; exit 1; }
fi
log=$out/gpu-check.log
: >"$log"

# Everything said goes to the log first; a reader that goes away (a closed
# pipe) stops the echo on stdout, not the check or its cleanup.
stdout_gone=0
trap 'stdout_gone=1' PIPE
say() {
  printf '%s\n' "$*" >>"$log"
  ((stdout_gone)) || printf '%s\n' "$*" 2>/dev/null
}
left() { echo $((budget - (SECONDS - start))); }
# The smaller of a step's own limit and what the budget leaves (minus a
# reserve for the summary and the cleanup).
cap() {
  local l
  l=$(($(left) - 15))
  echo $(($1 < l ? $1 : l))
}
die() {
  say "gpu-check: FAILED: $*"
  say "gpu-check: logs in $out"
  exit 1
}

say "gpu-check: logs in $out ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname), uid $(id -u))"

# The runs set every NCCL and linkpass variable they depend on: one
# inherited from this shell (a GPU image's NCCL_IB_DISABLE, NCCL_DEBUG_FILE,
# NCCL_TOPO_FILE ...) would change what is measured or where NCCL logs.
inherited=$(compgen -e | grep -E '^(NCCL_|LINKPASS_|SIMVERBS_)' | tr '\n' ' ')
if [ -n "$inherited" ]; then
  say "gpu-check: unsetting inherited variables: $inherited"
  for v in $inherited; do unset "$v"; done
fi

# ---- 1. Is there an NVIDIA GPU at all?  nvidia-smi first (no build
# needed), then the CUDA runtime through nccl-smoke --probe.
smi_gpus=-1 smi_note="nvidia-smi: not installed"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1
  rc=$?
  smi_gpus=$(grep -c '^GPU [0-9]' "$out/nvidia-smi.txt")
  if ((smi_gpus > 0)); then
    smi_note="nvidia-smi -L: $smi_gpus GPU(s), $(grep -m1 '^GPU [0-9]' "$out/nvidia-smi.txt")"
    timeout 20 nvidia-smi >>"$out/nvidia-smi.txt" 2>&1 # the driver, the GPU's state, for the record
  else
    smi_note="nvidia-smi -L: no GPU listed (exit $rc: $(head -c 200 "$out/nvidia-smi.txt" | head -1))"
    # Conclusive only when it ran and found none; a broken nvidia-smi
    # leaves the answer to the CUDA runtime.
    if ((rc != 0)) && ! grep -q 'No devices were found' "$out/nvidia-smi.txt"; then smi_gpus=-1; fi
  fi
fi

no_gpu() {
  say "gpu-check: no NVIDIA GPU is visible on this machine; nothing was run."
  say "  looked for: $smi_note"
  say "              $1"
  say "  This check runs real NCCL ($CUDA_HOME) on an NVIDIA GPU and needs one."
  say "  The plugin's other tests do not: 'bash scripts/test.sh' (ctest) runs them on the simulated fabric."
  say "gpu-check: logs in $out"
  exit 2
}

cuda_ld=$CUDA_HOME/lib64:$CUDA_HOME/lib
probe() { # SMOKE: runs nccl-smoke --probe, sets probe_rc
  LD_LIBRARY_PATH=$cuda_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 30 "$1" --probe >"$out/probe.txt" 2>&1
  probe_rc=$?
}
probe_line() { grep -m1 -E 'no NVIDIA GPU|GPU is visible' "$out/probe.txt" || head -3 "$out/probe.txt" | tr '\n' ' '; }

if ((smi_gpus == 0)); then
  # nvidia-smi works and lists none: do not build; ask the CUDA runtime too
  # if a built nccl-smoke is at hand.
  smoke=${build_dir:-$top/build}/bench/nccl-smoke
  if [ -x "$smoke" ]; then
    probe "$smoke"
    no_gpu "nccl-smoke --probe (exit $probe_rc): $(probe_line)"
  fi
  no_gpu "nccl-smoke: not run (not built yet; nvidia-smi already lists no GPU)"
fi

# ---- 2. Build (or take the given tree).
if [ -n "$build_dir" ]; then
  build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || die "no build directory ${GPU_CHECK_BUILD_DIR:-$top/build}"
  say "gpu-check: using the build in $build_dir (not rebuilding)"
else
  say "gpu-check: building (scripts/build.sh, log: $out/build.log) ..."
  t=$(cap 300)
  build_dir=$(timeout "$t" bash "$top/scripts/build.sh" 2>"$out/build.log" | tail -1)
  rc=${PIPESTATUS[0]}
  if ((rc != 0)) || [ ! -d "$build_dir" ]; then
    say "$(tail -20 "$out/build.log")"
    die "the build failed (exit $rc$( ((rc == 124)) && echo ", timed out after $t s"))"
  fi
  say "gpu-check: built in $build_dir ($((SECONDS - start)) s so far)"
fi

smoke=$build_dir/bench/nccl-smoke
if [ ! -x "$smoke" ]; then
  why="nccl-smoke is not in $build_dir/bench: LINKPASS_NCCL_SMOKE=OFF, or CMake found no CUDA runtime or NCCL (CUDA_HOME=$CUDA_HOME; cache: $(
    timeout 20 cmake -N -LA "$build_dir" 2>/dev/null | grep -E '^LINKPASS_(NCCL_SMOKE|CUDA_RUNTIME_INCLUDE_DIR|NCCL_INCLUDE_DIR|CUDART_LIBRARY|NCCL_LIBRARY)' | tr '\n' ' '))"
  ((smi_gpus > 0)) && die "$why"
  no_gpu "$why"
fi
probe "$smoke"
case $probe_rc in
0) say "gpu-check: $(grep -m1 '^# device' "$out/probe.txt" | sed 's/^# //')" ;;
2) no_gpu "nccl-smoke --probe (exit 2): $(probe_line)" ;;
*)
  say "$(cat "$out/probe.txt")"
  die "nccl-smoke --probe exited $probe_rc (expected 0: a GPU, or 2: none)"
  ;;
esac
say "gpu-check: $(grep -m1 '^# NCCL' "$out/probe.txt" | sed 's/^# //')"
if grep -qE '^# device .*compute mode (exclusive-process|prohibited)' "$out/probe.txt"; then
  die "GPU 0's compute mode lets no second process use it, and both ranks run on it (nvidia-smi -c DEFAULT, as root, or an MPS daemon would)"
fi
grep -q '^# NCCL 2\.28\.' "$out/probe.txt" || say "gpu-check: WARNING: this check was written for NCCL 2.28 (its log lines)"

# ---- 3. What the runs need.
simverbs=$build_dir/simverbs/simverbs
plugin=$build_dir/lib/libnccl-net-linkpass.so
sink=$build_dir/tests/failover/syslog_sink
conf=$top/tests/simverbs/configs/two-hosts-4nic.conf
for f in "$simverbs" "$plugin" "$sink" "$conf"; do [ -e "$f" ] || die "missing $f"; done
if [ "$(id -u)" != 0 ]; then
  say "gpu-check: WARNING: not root: 'simverbs run' cannot show the simulated /sys/class/infiniband (NCCL's IB" \
    "transport needs it; its runs are skipped), and kernel.yama.ptrace_scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo ?)" \
    "may stop the simulated NICs' process_vm_writev"
fi

fabric=gpuchk$$
export SIMVERBS_FABRIC=$fabric
sockdir=
sink_pid=
job_pids=()
cleanup() {
  local p
  for p in "${job_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${job_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null
  wait 2>/dev/null
  timeout 20 "$simverbs" down --fabric "$fabric" >/dev/null 2>&1
  [ -n "$sockdir" ] && rm -rf "$sockdir"
}
trap cleanup EXIT
trap 'say "gpu-check: interrupted"; exit 130' INT TERM

# The simulated NICs replace whatever sits at their PCI addresses inside
# `simverbs run`'s /sys view: move a NIC that would hide the GPU.
fabric_conf=$out/fabric.conf
cp "$conf" "$fabric_conf"
gpu_bus=$(sed -n 's/^# device [0-9]* of [0-9]*: .*, PCI \([0-9A-Fa-f:.]*\),.*/\1/p' "$out/probe.txt" | tr 'A-F' 'a-f')
gpu_bus=${gpu_bus: -12} # dddd:bb:dd.f, as the topology file writes it
if [ -n "$gpu_bus" ] && grep -q "pci=$gpu_bus\b" "$fabric_conf"; then
  sed -i "s/pci=$gpu_bus\b/pci=0000:fe:1f.7/" "$fabric_conf"
  say "gpu-check: a simulated NIC had the GPU's PCI address $gpu_bus: moved to 0000:fe:1f.7 in $fabric_conf"
fi
timeout 30 "$simverbs" up "$fabric_conf" --fabric "$fabric" >"$out/fabric.txt" 2>&1 ||
  { say "$(cat "$out/fabric.txt")"; die "simverbs up failed"; }
say "gpu-check: fabric $fabric is up (2 hosts x 4 NICs, $conf)"

# NCCL's IB transport reads /sys/class/infiniband/<dev>/device by absolute
# path; `simverbs run` shows the simulated one there only as root.
sysview=0
if timeout 20 "$simverbs" run --host node0 --fabric "$fabric" -- test -e /sys/class/infiniband/mlx5_0/device \
  >"$out/sysview.txt" 2>&1; then
  sysview=1
else
  say "gpu-check: under 'simverbs run', /sys/class/infiniband/mlx5_0/device does not exist: NCCL's IB runs are skipped" \
    "($(head -c 300 "$out/sysview.txt"))"
fi

sockdir=$(mktemp -d /tmp/gpuchk.XXXXXX) # short: a socket path has 108 bytes
sock=$sockdir/log.sock
"$sink" "$sock" "$out/syslog.txt" --stamp >>"$out/syslog-sink.txt" 2>&1 &
sink_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || die "the syslog sink did not start ($sink)"

# ---- 4. The runs.

# The environment of one rank: RANK TRANSPORT -> envs[].  Both transports
# get the same pinning and settings; only the net differs.
#   NCCL_HOSTID          a host of its own per rank: two "nodes" on one GPU
#   NCCL_P2P/SHM_DISABLE only the network between them
#   NCCL_SOCKET_IFNAME   bootstrap and out-of-band on loopback, off the NICs
#   NCCL_IB_HCA          the fabric's four NICs, exact names
#   NCCL_NET_MERGE_LEVEL=LOC  no NIC fusion: the simulated PCI directories
#                        have no subsystem link, so NCCL hangs every NIC off
#                        one CPU and its IB transport would fuse the four
#                        into one; linkpass offers no makeVDevice.  Both see
#                        the same four devices
#   NCCL_IB_TIMEOUT=14   a retry budget of 0.54 s (4.096 us x 2^14 x 8): a 5 s pull outlasts it
#   NCCL_NET_GDR_LEVEL=LOC, NCCL_DMABUF_ENABLE=0: the simulated NICs reach
#                        host memory only, never GPU memory
#   NCCL_CUMEM_HOST_ENABLE=0: NCCL's host buffers from cudaHostAlloc, the
#                        pinned memory RDMA stacks have long registered
#   NCCL_GIN_TYPE=2      GIN's host proxy: by default 2.28.9 first probes
#                        GDAKI, which counts mlx5 devices only, and with none
#                        (simverbs' are not) leaves its GIN pointer at -1 and
#                        crashes in init (src/plugin/net.cc; NVIDIA/nccl PR
#                        1881, fixed in 2.29).  Only the built-in IB entry
#                        reads it; no collective here uses GIN.
# shellcheck disable=SC2054 # the commas are inside values (NCCL_DEBUG_SUBSYS)
set_env() {
  envs=(NCCL_HOSTID="$fabric-node$1" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
    NCCL_SOCKET_IFNAME=lo NCCL_IB_HCA="=mlx5_0,mlx5_1,mlx5_2,mlx5_3" NCCL_IB_TIMEOUT=14 NCCL_NET_GDR_LEVEL=LOC
    NCCL_NET_MERGE_LEVEL=LOC NCCL_DMABUF_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 NCCL_GIN_TYPE=2)
  case $2 in
  linkpass) envs+=(NCCL_NET_PLUGIN="$plugin" NCCL_NET=linkpass LINKPASS_SYSLOG_SOCKET="$sock") ;;
  ib) envs+=(NCCL_NET_PLUGIN=none NCCL_NET=IB) ;;
  esac
}

# start_job NAME TRANSPORT LIMIT_S SMOKE_ARGS...: both ranks in the
# background, each `simverbs run` as node0 / node1; the verbs library comes
# from simverbs (run puts its lib/ first in LD_LIBRARY_PATH), CUDA and NCCL
# from CUDA_HOME.
start_job() {
  local name=$1 tr=$2 lim=$3 r
  shift 3
  rm -f "$out/$name.id"
  job_pids=()
  for r in 0 1; do
    set_env "$r" "$tr"
    printf '%s\n' "+ simverbs run --host node$r --fabric $fabric -- env ${envs[*]} $smoke --rank $r --nranks 2" \
      "  --id-file $out/$name.id $*" >"$out/$name.rank$r.log"
    LD_LIBRARY_PATH=$cuda_ld:$(dirname "$plugin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      timeout -k 5 "$lim" "$simverbs" run --host "node$r" --fabric "$fabric" -- env "${envs[@]}" \
      "$smoke" --rank "$r" --nranks 2 --id-file "$out/$name.id" "$@" >>"$out/$name.rank$r.log" 2>&1 &
    job_pids+=($!)
  done
}

# wait_job NAME: sets rcs[NAME] ("rank0 rank1" exit statuses).
declare -A rcs=() status=() busbw=() wrongs=() note=()
wait_job() {
  local p c=()
  for p in "${job_pids[@]}"; do
    wait "$p"
    c+=($?)
  done
  job_pids=()
  rcs[$1]="${c[*]}"
}

rc_text() { # "0 0" -> text
  local r t=""
  for r in $1; do
    case $r in
    0) t+="0 " ;;
    124 | 137) t+="$r(timeout) " ;;
    *) t+="$r " ;;
    esac
  done
  echo "${t% }"
}

# The line that says why a run failed: nccl-smoke's own (it names the
# operation and carries NCCL's last error), else NCCL's last WARN.
why() {
  local f=("$out/$1.rank0.log" "$out/$1.rank1.log") line
  line=$(grep -h -m1 -E 'nccl-smoke: rank [0-9]: .*(failed|error|did not|no NCCL unique id|wrong element|cannot|FAILED)' \
    "${f[@]}" 2>/dev/null | head -1)
  [ -n "$line" ] || line=$(grep -h 'NCCL WARN' "${f[@]}" 2>/dev/null | tail -1)
  [ -n "$line" ] || line=$(tail -n1 "${f[0]}" 2>/dev/null)
  echo "${line:0:300}"
}

# run_sweep TRANSPORT OP: checked sizes 8 B .. max; the table into busbw[]/wrongs[].
run_sweep() {
  local tr=$1 op=$2 name=$1.$2 lim
  lim=$(cap 110)
  if ((lim < 40)); then
    status[$name]="not run: out of time"
    return
  fi
  say "gpu-check: $name: checked $op, 8 B .. $max_bytes, through $([ "$tr" = ib ] && echo "NCCL's IB" || echo linkpass) (limit ${lim} s) ..."
  start_job "$name" "$tr" "$lim" --op "$op" -b 8 -e "$max_bytes" -f 2 -n 3 -w 1 --timeout 30
  wait_job "$name"
  rm -f "$out/$name.id"
  local r rows=0
  for r in 0 1; do
    while read -r size _ _ _ _ _ bw wrong; do
      ((r == 0)) && busbw[$name,$size]=$bw
      wrongs[$name,$size]=$((${wrongs[$name,$size]:-0} + wrong))
      rows=$((rows + 1))
    done < <(awk '$3 == "int32" && $1 ~ /^[0-9]+$/ && NF == 8' "$out/$name.rank$r.log")
  done
  if [ "${rcs[$name]}" = "0 0" ] && grep -q '^# Wrong elements: 0 OK' "$out/$name.rank0.log" &&
    grep -q '^# Wrong elements: 0 OK' "$out/$name.rank1.log"; then
    status[$name]="PASS"
  else
    status[$name]="FAIL: exit $(rc_text "${rcs[$name]}"), $rows rows; $(why "$name")"
  fi
  say "gpu-check: $name: ${status[$name]}"
}

# port_bytes: "host:nic bytes" (tx + rx) per port, from simverbs status.
port_bytes() {
  timeout 10 "$simverbs" status --fabric "$fabric" 2>/dev/null | awk '$1 == "host" { h = $2 } $1 ~ /^mlx5_/ { n = $1 }
    $1 == "port" { b = 0; for (i = 1; i < NF; i++) if ($i == "tx" || $i == "rx") b += $(i + 1); print h ":" n, b }'
}

# busy_nic HOST: the NIC of HOST to pull: mlx5_0 if it carries traffic,
# else the first that does (NCCL chose which NICs to use), else mlx5_0.
busy_nic() {
  local a b busy
  a=$(port_bytes)
  sleep 0.5 # a measuring window
  b=$(port_bytes)
  busy=$(join <(sort <<<"$a") <(sort <<<"$b") | awk -v h="$1:" 'index($1, h) == 1 && $3 > $2 { sub(h, "", $1); print $1 }')
  echo "gpu-check: NICs of $1 carrying traffic: ${busy:-none seen}" >>"$log"
  if grep -qx mlx5_0 <<<"$busy" || [ -z "$busy" ]; then echo mlx5_0; else head -1 <<<"$busy"; fi
}

# run_flap TRANSPORT: 64 MiB all_reduce for flap_secs; once progress lines
# show traffic, the busy NIC of node0 is pulled for 5 s.
run_flap() {
  local tr=$1 name=$1.flap lim nic t_down="" t_up="" deadline n=0
  lim=$(cap $((flap_secs + 60)))
  if ((lim < flap_secs + 25)); then
    status[$name]="not run: out of time"
    return
  fi
  say "gpu-check: $name: 64 MiB all_reduce for $flap_secs s, a cable pulled for 5 s (limit ${lim} s) ..."
  start_job "$name" "$tr" "$lim" --op all_reduce -b 64M -e 64M -w 1 --duration "$flap_secs" --timeout 25
  deadline=$((SECONDS + lim))
  while ((SECONDS < deadline)); do
    n=$(grep -c '^progress ' "$out/$name.rank0.log" 2>/dev/null)
    ((n >= 3)) && break
    kill -0 "${job_pids[0]}" 2>/dev/null || break
    sleep 0.2
  done
  if ((n >= 3)); then
    nic=$(busy_nic node0)
    t_down=$(date +%s.%N)
    timeout 10 "$simverbs" link "node0:$nic" down --fabric "$fabric" >>"$log" 2>&1
    say "gpu-check: $name: node0:$nic pulled after $n iterations"
    sleep 5
    t_up=$(date +%s.%N)
    timeout 10 "$simverbs" link "node0:$nic" up --fabric "$fabric" >>"$log" 2>&1
    say "gpu-check: $name: node0:$nic plugged back in"
  else
    say "gpu-check: $name: no traffic to pull a cable under (only $n progress lines)"
  fi
  wait_job "$name"
  rm -f "$out/$name.id"

  local out0=$out/$name.rank0.log out1=$out/$name.rank1.log during=0 fo_nccl fo_sys fb iters slow
  if [ -n "$t_down" ]; then
    during=$(awk -v a="$t_down" -v b="$t_up" '/^progress / { for (i = 1; i <= NF; i++) if ($i ~ /^unix=/) { u = substr($i, 6) + 0; if (u > a && u < b) n++ } } END { print n + 0 }' "$out0")
  fi
  iters=$(grep -c '^progress ' "$out0")
  slow=$(sed -n 's/^# duration run: .*slowest after warm-up \([0-9.]*\) ms.*/\1/p' "$out0")
  fo_nccl=$(cat "$out0" "$out1" | grep -c 'event=failover')
  fb=$(cat "$out0" "$out1" | grep -c 'event=failback')
  fo_sys=$(grep -c 'event=failover' "$out/syslog.txt" 2>/dev/null)
  busbw[$name]=$(awk '$3 == "int32" && NF == 8 { print $7 }' "$out0" | tail -1)
  wrongs[$name]=$(cat "$out0" "$out1" | awk '$3 == "int32" && NF == 8 { w += $8; n++ } END { print n ? w : "-" }')
  note[$name]="exit $(rc_text "${rcs[$name]}"), $iters iterations (${during} while the cable was out), slowest ${slow:-?} ms"
  [ "$tr" = linkpass ] && note[$name]+=", failover lines: $fo_nccl in NCCL's log, $fo_sys in syslog; failback lines $fb"
  if [ -z "$t_down" ]; then
    status[$name]="FAIL: the cable was never pulled; $(why "$name")"
  elif [ "${rcs[$name]}" = "0 0" ] && grep -q '^# Wrong elements: 0 OK' "$out0" && grep -q '^# Wrong elements: 0 OK' "$out1"; then
    if [ "$tr" = linkpass ] && ((fo_nccl + fo_sys == 0)); then
      status[$name]="FAIL: the job went on, but no event=failover line in NCCL's log or syslog"
    elif ((during == 0)); then
      status[$name]="PASS, but no iteration completed while the cable was out"
      [ "$tr" = linkpass ] && status[$name]="FAIL: no iteration completed while the cable was out"
    else
      status[$name]="PASS: the job went on"
    fi
  else
    status[$name]="FAIL: $(why "$name")"
    [ "$tr" = ib ] && status[$name]="ended (expected without failover): $(why "$name")"
  fi
  say "gpu-check: $name: ${status[$name]} (${note[$name]})"
}

# The plugin proof: NCCL's own lines (NCCL 2.28.9: src/plugin/net/net_v11.cc,
# src/plugin/net.cc, src/init.cc), the plugin's, and the verbs library.
proof() { # NAME TRANSPORT -> sets status[NAME.proof]
  local name=$1 tr=$2 f r miss=() pats=()
  if [ "$tr" = linkpass ]; then
    pats=('NET/Plugin: Loaded net plugin linkpass \(v[0-9]+\)'
      "Successfully loaded external network plugin .*libnccl-net-linkpass\.so"
      'Assigned NET plugin linkpass to comm'
      'Using network linkpass'
      'NET/linkpass : device [0-9]+: mlx5_[0-3]:1 IB'
      '^# loaded: .*/simverbs/lib/libibverbs\.so')
  else
    pats=('Using network IB' 'NET/IB : Using \[0\]mlx5_' '^# loaded: .*/simverbs/lib/libibverbs\.so')
  fi
  for r in 0 1; do
    f=$out/$name.rank$r.log
    [ -f "$f" ] || { miss+=("rank $r: no log"); continue; }
    for p in "${pats[@]}"; do
      if grep -m1 -E -- "$p" "$f" >>"$out/nccl-proof.txt"; then :; else miss+=("rank $r: /$p/"); fi
    done
    if [ "$tr" = linkpass ] && grep -m1 -E 'Using network (IB|Socket)' "$f" >>"$out/nccl-proof.txt"; then
      miss+=("rank $r: NCCL used another network")
    fi
  done
  if ((${#miss[@]})); then status[$name.proof]="FAIL: missing ${miss[*]}"; else status[$name.proof]="PASS"; fi
  say "gpu-check: $name: NCCL's log shows $tr: ${status[$name.proof]}"
}

: >"$out/nccl-proof.txt"
for op in all_reduce sendrecv; do run_sweep linkpass "$op"; done
proof linkpass.all_reduce linkpass
run_flap linkpass
if ((sysview)); then
  for op in all_reduce sendrecv; do run_sweep ib "$op"; done
  proof ib.all_reduce ib
  run_flap ib
else
  for n in ib.all_reduce ib.sendrecv ib.flap ib.all_reduce.proof; do
    status[$n]="not run: no simulated /sys/class/infiniband under 'simverbs run' (needs root)"
  done
fi

# ---- 5. The summary.
sizes=()
for ((s = 8; s <= $(numfmt --from=iec "$max_bytes"); s *= 2)); do sizes+=("$s"); done
cell() { # NAME SIZE
  local b=${busbw[$1,$2]:-} w=${wrongs[$1,$2]:-}
  if [ -z "$b" ]; then printf '%16s' "-"; else printf '%9s (%4s)' "$b" "$w"; fi
}
{
  echo
  echo "=== gpu-check summary: $(grep -m1 '^# device' "$out/probe.txt" | sed 's/^# //')"
  echo "    $(grep -m1 '^# NCCL' "$out/probe.txt" | sed 's/^# //'); 2 ranks on GPU 0, one per simulated host; busbw GB/s (#wrong, both ranks)"
  printf '%10s | %-33s | %-33s\n' "" "all_reduce int32 sum" "sendrecv int32"
  printf '%10s | %16s %16s | %16s %16s\n' "size (B)" "linkpass" "built-in IB" "linkpass" "built-in IB"
  for s in "${sizes[@]}"; do
    printf '%10s | %s %s | %s %s\n' "$s" "$(cell linkpass.all_reduce "$s")" "$(cell ib.all_reduce "$s")" \
      "$(cell linkpass.sendrecv "$s")" "$(cell ib.sendrecv "$s")"
  done
  for tr in linkpass ib; do
    printf '%10s | %-12s %9s (%4s)  %s\n' "flap" "$([ "$tr" = ib ] && echo built-in-IB || echo linkpass)" \
      "${busbw[$tr.flap]:--}" "${wrongs[$tr.flap]:--}" "${status[$tr.flap]:-not run}"
    [ -n "${note[$tr.flap]:-}" ] && printf '%10s |   %s\n' "" "${note[$tr.flap]}"
  done
  echo
  for n in linkpass.all_reduce linkpass.sendrecv linkpass.all_reduce.proof linkpass.flap ib.all_reduce ib.sendrecv \
    ib.all_reduce.proof ib.flap; do
    printf '  %-26s %s\n' "$n" "${status[$n]:-not run}"
  done
} >"$out/summary.txt"
say "$(cat "$out/summary.txt")"

verdict=0
for n in linkpass.all_reduce linkpass.sendrecv linkpass.all_reduce.proof linkpass.flap; do
  case ${status[$n]:-} in PASS*) ;; *) verdict=1 ;; esac
done
say ""
say "gpu-check: NCCL's own lines that prove the transport: $out/nccl-proof.txt"
if ((verdict == 0)); then
  say "gpu-check: PASS: real NCCL used linkpass on the GPU, every element right, and the job went on through a cable pull ($((SECONDS - start)) s)"
else
  say "gpu-check: FAIL: a linkpass check failed (above); logs in $out ($((SECONDS - start)) s)"
fi
exit $verdict
