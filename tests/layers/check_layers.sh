#!/bin/bash
# The layered house (docs/DESIGN.md, "Layers"): every #include "x.h" of a
# src/ file names a module on its own floor or a lower one, the modules form
# no circle, and the table lists exactly the modules src/ has.
#   check_layers.sh SRC_DIR DESIGN_MD
set -u
src=${1:?src dir} design=${2:?DESIGN.md}
fail=0
err() { echo "layers: $*" >&2; fail=1; }

# The table between <!-- layers --> and <!-- /layers -->: "| N name | a, b |".
declare -A floor name
while IFS='|' read -r _ f mods _; do
  num=$(awk '{print $1}' <<<"$f")
  [[ $num =~ ^[0-9]+$ ]] || continue
  for m in ${mods//,/ }; do
    m=${m//\`/}
    [[ -n ${floor[$m]:-} ]] && err "$m is listed on two floors"
    floor[$m]=$num
    name[$m]=$(sed 's/^ *//; s/ *$//' <<<"$f")
  done
done < <(sed -n '/<!-- layers -->/,/<!-- \/layers -->/p' "$design")
[[ ${#floor[@]} -gt 0 ]] || { err "no layer table in $design"; exit 1; }

declare -A have edges
for file in "$src"/*.c "$src"/*.h; do
  mod=$(basename "$file"); mod=${mod%.*}
  have[$mod]=1
  if [[ -z ${floor[$mod]:-} ]]; then
    err "src/$(basename "$file") belongs to no floor: add module '$mod' to the layer table in docs/DESIGN.md"
    continue
  fi
  while read -r inc; do
    dep=${inc%.h}
    [[ -e $src/$inc ]] || continue       # system and include/ headers
    [[ $dep == "$mod" ]] && continue
    if [[ -z ${floor[$dep]:-} ]]; then continue; fi  # reported as its own file
    if (( floor[$dep] > floor[$mod] )); then
      err "src/$(basename "$file") (floor ${name[$mod]}) includes $inc (floor ${name[$dep]}): an arrow back up"
    fi
    edges[$mod]+=" $dep"
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done
for m in "${!floor[@]}"; do
  [[ -n ${have[$m]:-} ]] || err "the layer table lists '$m', which src/ does not have"
done

# No circle, even within a floor: depth-first search with colours.
declare -A colour
cycle=""
visit() {
  local m=$1 d
  colour[$m]=grey
  for d in ${edges[$m]:-}; do
    if [[ ${colour[$d]:-} == grey ]]; then cycle="$d <- $m"; return 1; fi
    if [[ -z ${colour[$d]:-} ]]; then visit "$d" || { cycle="$cycle <- $m"; return 1; }; fi
  done
  colour[$m]=black
}
for m in "${!have[@]}"; do
  if [[ -z ${colour[$m]:-} ]] && ! visit "$m"; then err "a circle of includes: $cycle"; break; fi
done

(( fail == 0 )) && echo "layers: ${#have[@]} modules on $(printf '%s\n' "${floor[@]}" | sort -u | wc -l) floors, no arrow up, no circle"
exit $fail
