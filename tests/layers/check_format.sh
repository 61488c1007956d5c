#!/bin/bash
# src/, plugin/ and tools/ are laid out as .clang-format says (docs/STYLE.md).
#   check_format.sh ROOT
set -u
root=${1:?root}
cf=$(command -v clang-format || command -v clang-format-14) || { echo "format: clang-format is not installed (scripts/setup.sh installs it)"; exit 77; }
bad=()
for f in "$root"/src/*.[ch] "$root"/plugin/*.c "$root"/tools/*.c; do
  "$cf" --style=file:"$root/.clang-format" "$f" | cmp -s - "$f" || bad+=("${f#"$root"/}")
done
if ((${#bad[@]})); then
  echo "format: not laid out as .clang-format says: ${bad[*]}" >&2
  echo "format: fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "format: src/, plugin/ and tools/ match .clang-format"
