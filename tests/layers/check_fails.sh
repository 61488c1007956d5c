#!/bin/bash
# The layer check must refuse what breaks the house: an include going up a
# floor, a circle within one floor, and a file on no floor.
#   check_fails.sh CHECK SRC_DIR DESIGN_MD
set -u
check=${1:?} src=${2:?} design=${3:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
expect_refused() { # what, then the expected message
  if out=$(bash "$check" "$tmp/src" "$design" 2>&1); then
    echo "check_fails: $1 was accepted" >&2; status=1
  elif ! grep -q "$2" <<<"$out"; then
    echo "check_fails: $1 refused without saying '$2': $out" >&2; status=1
  fi
}
fresh() { rm -rf "$tmp/src"; cp -r "$src" "$tmp/src"; }

fresh
bash "$check" "$tmp/src" "$design" >/dev/null || { echo "check_fails: the real src/ is refused" >&2; exit 1; }
fresh; echo '#include "plugin.h"' >>"$tmp/src/comm.c"
expect_refused "comm.c including plugin.h" "an arrow back up"
fresh; echo '#include "send_extra.h"' >>"$tmp/src/comm.h"; printf '#include "comm.h"\n' >"$tmp/src/send_extra.h"
expect_refused "a file on no floor" "belongs to no floor"
fresh; echo '#include "pool.h"' >>"$tmp/src/clock.h"; echo '#include "clock.h"' >>"$tmp/src/pool.h"
expect_refused "a circle within the ground floor" "a circle"
exit $status
