#!/usr/bin/env bash
# `simverbs run` shows the host's simulated sysfs at the kernel's paths:
# /sys/class/infiniband lists exactly the host's NICs, each NIC's `device`
# link resolves to its configured PCI directory (numa_node, local_cpulist,
# class), even at an address a real device has; class/infiniband_verbs is
# there; GPU peer memory's file is where NCCL looks on a host with
# `peer_memory on`; a long-running program sees a port's state follow a link flap; the
# rest of /sys is the real one; the view is read-only and leaves no mount
# behind.  Without CAP_SYS_ADMIN, `run` warns once and the program still runs.
# With SV_NETNS=1 the same on a netns fabric.
# usage: sysview.sh   (it writes its own topology file)
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "the sysfs view needs root (this runs as uid $(id -u))"
err=$(unshare --mount true 2>&1) || skip "cannot make a mount namespace: $err"

work=$(mktemp -d)
trap 'sv_cleanup; rm -rf "$work"' EXIT
pci=/sys/devices/pci0000:00
# node0:mlx5_1 takes the address of a real device when there is one, so
# that the simulated NIC is seen to replace it.
real_pci=$(ls "$pci" | grep -E '^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$' | head -1 || true)
claimed=${real_pci:-0000:2a:00.0}
cat >"$work/sysview.conf" <<EOF
link ib
peer_memory on
host node0
nic mlx5_0 numa=1 pci=0000:0c:00.0
nic mlx5_1 numa=0 pci=$claimed
peer_memory off
host node1
nic mlx5_0 numa=0 pci=0000:8a:00.0
EOF
had_ib=$([ -e /sys/class/infiniband ] && echo yes || echo no)
sv_up "$work/sysview.conf"
tree=/dev/shm/simverbs-$FABRIC.d

echo "== class/infiniband lists exactly the host's NICs"
sv_run node0 ls /sys/class/infiniband >"$work/out" 2>"$work/err" || fail "ls failed: $(cat "$work/err")"
[ ! -s "$work/err" ] || fail "simverbs run complained: $(cat "$work/err")"
[ "$(tr '\n' ' ' <"$work/out")" = "mlx5_0 mlx5_1 " ] || fail "node0 lists: $(cat "$work/out")"
[ "$(sv_run node1 ls /sys/class/infiniband | tr '\n' ' ')" = "mlx5_0 " ] || fail "node1 does not list only mlx5_0"

echo "== device links resolve to the configured PCI directories"
check_nic() { # host nic pci numa
  local dev=/sys/class/infiniband/$2/device got
  got=$(sv_run "$1" readlink -f "$dev")
  [ "$got" = "$pci/$3" ] || fail "$1: $dev resolves to '$got', expected $pci/$3"
  got=$(sv_run "$1" cat "$pci/$3/numa_node" "$pci/$3/local_cpulist" "$pci/$3/class" | tr '\n' ' ')
  [ "$got" = "$4 $(cat "$tree/$1/sys/devices/pci0000:00/$3/local_cpulist") 0x020700 " ] ||
    fail "$1: $pci/$3 holds '$got', expected numa $4, the simulated local_cpulist, class 0x020700"
}
check_nic node0 mlx5_0 0000:0c:00.0 1
check_nic node0 mlx5_1 "$claimed" 0
check_nic node1 mlx5_0 0000:8a:00.0 0
[ "$(sv_run node0 cat /sys/class/infiniband_verbs/uverbs0/ibdev /sys/class/infiniband_verbs/abi_version |
  tr '\n' ' ')" = "mlx5_0 6 " ] || fail "class/infiniband_verbs does not name mlx5_0 with ABI 6"

echo "== the rest of /sys is the real one"
want=$( (ls -A /sys/class; echo infiniband; echo infiniband_verbs) | sort -u)
[ "$(sv_run node0 ls -A /sys/class | sort)" = "$want" ] || fail "/sys/class lost or gained entries"
want=$( (ls -A "$pci"; echo 0000:0c:00.0; echo "$claimed") | sort -u)
[ "$(sv_run node0 ls -A "$pci" | sort)" = "$want" ] || fail "$pci lost or gained entries"
sv_run node0 test -e /sys/class/net/lo || fail "/sys/class/net/lo is gone"
sv_run node0 test -d /sys/devices/system/cpu/cpu0 || fail "/sys/devices/system/cpu/cpu0 is gone"
if [ -n "$real_pci" ]; then
  other=$(ls "$pci" | grep -E '^[0-9a-f]{4}:' | grep -vx "$claimed" | head -1 || true)
  [ -z "$other" ] || sv_run node0 test -e "$pci/$other/vendor" || fail "the real $pci/$other is gone"
fi

echo "== GPU peer memory shows where NCCL looks, on node0 only"
peers=/sys/kernel/mm/memory_peers/nv_mem/version
sv_run node0 test -e "$peers" || fail "node0 (peer_memory on) has no $peers"
sv_run node1 test -e "$peers" && [ ! -e "$peers" ] && fail "node1 (peer_memory off) shows $peers"
want=$( (ls -A /sys/kernel/mm; echo memory_peers) | sort -u)
[ "$(sv_run node0 ls -A /sys/kernel/mm | sort)" = "$want" ] || fail "/sys/kernel/mm lost or gained entries"
[ "$(sv_run node0 ls -A /sys/kernel | sort)" = "$(ls -A /sys/kernel | sort)" ] || fail "/sys/kernel lost or gained entries"

echo "== the view is read-only"
sv_run node0 touch /sys/class/sv-probe 2>/dev/null && fail "a file could be created in /sys/class"
sv_run node0 bash -c 'echo x >/sys/class/infiniband/mlx5_0/ports/1/state' 2>/dev/null &&
  fail "a simulated sysfs file could be written"

echo "== a running program sees the port state follow the link"
# One process, started before the flap: it must see files renamed into the
# tree after its view was built.  It prints each file it is sent.
sv_cmd node0 bash -c 'while IFS= read -r f; do cat "$f" 2>&1 || echo MISSING; done'
coproc VIEW { "${SV_CMD[@]}"; }
SV_PIDS+=("$VIEW_PID")
port=/sys/class/infiniband/mlx5_0/ports/1
view_read() { # file expected
  local line
  printf '%s\n' "$1" >&"${VIEW[1]}"
  IFS= read -r -t 20 line <&"${VIEW[0]}" || fail "the running program did not answer for $1"
  [ "$line" = "$2" ] || fail "$1 reads '$line' in the running program, expected '$2'"
}
view_read "$port/state" "4: ACTIVE"
"$SIMVERBS" link node0:mlx5_0 down >/dev/null
view_read "$port/state" "1: DOWN"
view_read "$port/phys_state" "3: Disabled"
"$SIMVERBS" link node0:mlx5_0 up >/dev/null
view_read "$port/state" "4: ACTIVE"
view_read "$port/phys_state" "5: LinkUp"
exec {VIEW[1]}>&-
wait "$VIEW_PID" || fail "the running program failed"

echo "== verbs programs still work"
out=$(sv_run node0 ibv_devinfo -v) || fail "ibv_devinfo -v failed: $out"
[ "$(grep -c '^hca_id:' <<<"$out")" = 2 ] || fail "ibv_devinfo -v does not list node0's 2 NICs: $out"

# A netns host cannot be entered at all without CAP_SYS_ADMIN.
if [ "${SV_NETNS:-0}" != 1 ] && command -v setpriv >/dev/null; then
  echo "== without CAP_SYS_ADMIN: one warning, and the program runs"
  sv_cmd node0 ibv_devinfo
  setpriv --bounding-set -sys_admin --inh-caps -sys_admin "${SV_CMD[@]}" >"$work/out" 2>"$work/err" ||
    fail "ibv_devinfo failed without CAP_SYS_ADMIN: $(cat "$work/err")"
  cat "$work/err"
  [ "$(wc -l <"$work/err")" = 1 ] && grep -q "^simverbs run: warning: cannot show host node0's sysfs at /sys: " \
    "$work/err" && grep -q 'ibv_get_sysfs_path()' "$work/err" || fail "not the one warning expected"
  [ "$(grep -c '^hca_id:' "$work/out")" = 2 ] || fail "ibv_devinfo without the view: $(cat "$work/out")"
fi

echo "== nothing is left behind"
! grep -q simverbs-sysview /proc/self/mountinfo || fail "a mount of the view shows outside it"
[ "$([ -e /sys/class/infiniband ] && echo yes || echo no)" = "$had_ib" ] || fail "/sys/class/infiniband changed here"
echo "PASS"
