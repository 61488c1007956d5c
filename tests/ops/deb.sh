#!/usr/bin/env bash
# The Debian package as an operator uses it: built with CPack from this
# build, installed with dpkg -i into this machine, a cable pulled under a
# checked all_reduce that loads the INSTALLED plugin by name (no library
# path, no --plugin path: dlopen finds it through ld.so's cache), then
# removed with dpkg -r, leaving nothing behind.  Root only; skipped (77)
# where dpkg cannot be used or a linkpass package is installed already.
# usage: deb.sh BUILD_DIR    (env: SIMVERBS PERF SINK CONFS; PLUGIN unused)
. "$(dirname "${BASH_SOURCE[0]}")/../lib/limit.sh" # under ctest: end with SIGTERM, and clean up, before its SIGKILL
source "$(dirname "$0")/lib.sh"
: "${SINK:?}"
build=${1:?usage: deb.sh BUILD_DIR}
[ "$(id -u)" = 0 ] || skip "dpkg -i needs root (this runs as uid $(id -u))"
command -v dpkg >/dev/null && command -v cpack >/dev/null || skip "dpkg or cpack is not installed"
if dpkg-query -W -f='${Status}' linkpass 2>/dev/null | grep -q installed; then
  skip "a linkpass package is installed on this machine already: not replacing it"
fi

(cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/pkg/linkpass_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "cpack made no linkpass_*.deb: $(ls "$tmp/pkg")"
echo "package: $(basename "$deb")"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$multiarch
# /lib is /usr/lib on Debian 12 (merged /usr): ld.so may name either.
installed_re="(/usr)?/lib/$multiarch/libnccl-net-linkpass\.so"
dpkg-deb -c "$deb" >"$tmp/contents"
for f in ".$libdir/libnccl-net-linkpass.so" ./usr/bin/linkpass-status ./usr/share/man/man1/linkpass-status.1 \
  ./usr/share/doc/linkpass/OPERATIONS.md ./usr/share/doc/linkpass/grafana/linkpass.json \
  ./usr/share/doc/linkpass/copyright; do
  grep -q " $f\$" "$tmp/contents" || fail "the package lacks $f"
done
depends=$(dpkg-deb -f "$deb" Depends)
for d in libibverbs1 libnl-3-200 libnl-route-3-200; do
  [[ $depends == *"$d"* ]] || fail "Depends: $depends does not name $d"
done
if grep -qE ' \./(usr/)?(local|home|root|tmp|work)' "$tmp/contents"; then fail "the package installs outside /usr: $(grep -E ' \./(usr/)?(local|home|root|tmp|work)' "$tmp/contents" | head -3)"; fi

on_exit+=("dpkg -r linkpass >/dev/null 2>&1")
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -i failed"; }
dpkg -L linkpass >"$tmp/files"
ldconfig -p >"$tmp/ldcache" # (not piped into grep -q: pipefail would see ldconfig's SIGPIPE)
grep -qE "libnccl-net-linkpass\.so .*=> $installed_re\$" "$tmp/ldcache" ||
  fail "ld.so's cache does not know the installed plugin (the ldconfig trigger did not run)"
[ -x /usr/bin/linkpass-status ] || fail "linkpass-status is not installed"
man -w linkpass-status >/dev/null 2>&1 || [ -e /usr/share/man/man1/linkpass-status.1 ] || fail "no man page"

# The installed plugin, by name: NCCL_NET_PLUGIN=linkpass, no LD_LIBRARY_PATH.
start_sink
unset LD_LIBRARY_PATH
sv up "$CONFS/two-hosts-4nic.conf"
NCCL_NET_PLUGIN=linkpass "$PERF" --fabric "$SIMVERBS_FABRIC" --hosts node0,node1 -N 2 --op all_reduce -b 1M -e 1M \
  --duration 6 --timeout 60 >"$tmp/out" 2>&1 &
perf=$!
pids+=("$perf")
wait_until 60 "the first iterations" has_line '^ +1\.0 ' "$tmp/out"
maps_have_installed() {
  local p
  for p in $(pgrep -f -- "--fabric $SIMVERBS_FABRIC"); do
    grep -qE " $installed_re\$" "/proc/$p/maps" 2>/dev/null && return 0
  done
  return 1
}
wait_until 10 "a rank has the installed plugin ($libdir) mapped" maps_have_installed
sv link node0:mlx5_0 down
wait_until 20 "a failover through the installed plugin" has_line "event=failover" "$tmp/syslog"
sv link node0:mlx5_0 up
expect_clean_run

dpkg -r linkpass >"$tmp/dpkg-r.log" 2>&1 || { cat "$tmp/dpkg-r.log" >&2; fail "dpkg -r failed"; }
status=$(dpkg-query -W -f='${Status}' linkpass 2>/dev/null || true)
[[ -z $status || $status == *not-installed* ]] || fail "after dpkg -r the package is still '$status'"
left=()
while read -r f; do
  [ -d "$f" ] && continue # shared directories (/usr/bin ...) stay
  [ -e "$f" ] && left+=("$f")
done <"$tmp/files"
((${#left[@]} == 0)) || fail "dpkg -r left files behind: ${left[*]}"
ldconfig -p >"$tmp/ldcache"
! grep -q libnccl-net-linkpass "$tmp/ldcache" || fail "ld.so's cache still lists the plugin after removal"
echo "PASS deb: $(basename "$deb") installed, a cable pull survived through the installed plugin, removed cleanly"
