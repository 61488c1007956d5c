#!/usr/bin/env bash
# Compare the dynamic symbols (with versions) that a built libibverbs.so.1
# exports against rdma-core 44's list.
#
# usage: check_symbols.sh <libibverbs.so.1> <reference-dynsyms.txt>
#
# Both sides are reduced to one "VERSION name" line per symbol, a compat
# (non-default) version written in parentheses: "(IBVERBS_1.0) ibv_open_device".
# Exit status: 0 when the sets are identical, 1 on any difference, 2 on usage
# or tool errors.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <libibverbs.so.1> <reference-dynsyms.txt>" >&2
  exit 2
fi
lib=$1
ref=$2
for f in "$lib" "$ref"; do
  if [[ ! -r $f ]]; then
    echo "$0: cannot read $f" >&2
    exit 2
  fi
done
if ! command -v objdump >/dev/null; then
  echo "$0: objdump (binutils) is required" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# objdump -T rows: ADDRESS FLAGS SECTION SIZE VERSION [VISIBILITY] NAME.  The
# flags column holds embedded blanks, so fields are taken from the right;
# undefined imports (section *UND*) are not part of what the library offers.
objdump -T "$lib" >"$tmp/objdump.out" || {
  echo "$0: objdump -T failed on $lib" >&2
  exit 2
}
awk '
  /^[0-9a-fA-F]+ / {
    if ($0 ~ /\*UND\*/) next
    name = $NF
    ver = $(NF - 1)
    if (ver ~ /^\./ || ver ~ /^0x/) ver = $(NF - 2)  # .hidden/.protected/other marker
    print ver, name
  }
' "$tmp/objdump.out" | LC_ALL=C sort -u >"$tmp/actual"

# The reference is already in that form; only normalise blanks and drop
# comments or empty lines.
sed -e 's/#.*//' -e 's/[[:space:]]\+/ /g' -e 's/^ //' -e 's/ $//' "$ref" |
  grep -v '^$' | LC_ALL=C sort -u >"$tmp/expected"

if [[ ! -s $tmp/actual ]]; then
  echo "$0: $lib exports no dynamic symbols" >&2
  exit 1
fi

missing=$(LC_ALL=C comm -13 "$tmp/actual" "$tmp/expected")
extra=$(LC_ALL=C comm -23 "$tmp/actual" "$tmp/expected")
if [[ -z $missing && -z $extra ]]; then
  echo "OK: $(wc -l <"$tmp/actual") dynamic symbols of $lib match $ref"
  exit 0
fi

nmissing=0
nextra=0
if [[ -n $missing ]]; then
  nmissing=$(wc -l <<<"$missing")
  echo "Missing from $lib (in the reference, not exported): $nmissing"
  awk '{ print "  " $0 }' <<<"$missing"
fi
if [[ -n $extra ]]; then
  nextra=$(wc -l <<<"$extra")
  echo "Unexpected in $lib (exported, not in the reference): $nextra"
  awk '{ print "  " $0 }' <<<"$extra"
fi
echo "FAIL: $((nmissing + nextra)) difference(s) between $lib and $ref"
exit 1
