#!/usr/bin/env bash
# What every unit of a build in the separate-compilation mode pays before its own code: an
# empty unit compiled with the precompiled header of ferry/ferry.hpp that the tests, examples
# and benchmarks use (FERRY_SEPARATE_COMPILATION, -O0 -g1, as the Debug builds).
#
#   benchmarks/compile_time/pch.sh [--runs N] [--compiler g++|clang++]...
#
# g++ writes a precompiled header without instantiating the templates its inline functions
# use, so each unit that includes it instantiates them again (every template a non-template
# inline function of the headers calls, whether the unit calls that function or not); clang++
# instantiates them once, in the header (-fpch-instantiate-templates, which CMake passes). The
# baseline, in the same run: the same empty unit with a precompiled header of ferry/arrays.hpp
# alone (devices, arrays, the ops), whose share was already small. Times are user CPU seconds
# (the machine is shared: wall seconds move with its load), medians of N runs (default 5),
# each unit's run next to the baseline's; ratios are medians of the per-run ratios. For g++,
# also a figure the load does not move: the functions the empty unit instantiates and compiles
# (the `;; Function` entries of -fdump-tree-original) and the size of that dump.
# About a minute: one compile of each precompiled header per compiler, then 2N small compiles.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
runs=5
compilers=()
usage() { sed -n '6p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage; runs="$2"; shift 2 ;;
    --compiler) [[ $# -ge 2 ]] || usage; compilers+=("$2"); shift 2 ;;
    *) usage ;;
  esac
done
[[ ${#compilers[@]} -eq 0 ]] && compilers=(g++ clang++)

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ferry_pch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++20 -O0 -g1 -DFERRY_SEPARATE_COMPILATION -I"$repo/include")
: >"$tmp/empty.cpp"

# user_seconds CMD...: runs CMD (exits the script if it fails), prints its user CPU seconds.
user_seconds() {
  local TIMEFORMAT='%3U'
  { time "$@" >/dev/null 2>"$tmp/err"; } 2>"$tmp/time" ||
    { echo "error: $*" >&2; head -30 "$tmp/err" >&2; exit 1; }
  cat "$tmp/time"
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
  if (NR % 2) printf "%.2f", v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "ferry's empty unit on a precompiled header, $(date '+%Y-%m-%d %H:%M'), $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "flags: ${flags[*]}, user CPU seconds, medians of $runs runs"
echo
echo "| compiler | header | precompiling it | empty unit on it | / arrays.hpp's | functions (MB) |"
echo "|---|---|---|---|---|---|"
declare -A unit=()
for cxx in "${compilers[@]}"; do
  command -v "$cxx" >/dev/null || { echo "$cxx: not found, skipped" >&2; continue; }
  pch_flags=() use=()
  declare -A build=()
  for h in arrays ferry; do
    printf '#include <ferry/%s.hpp>\n' "$h" >"$tmp/$h.hpp"
    if [[ "$cxx" == *clang* ]]; then
      out="$tmp/$h.hpp.pch" pch_flags=(-fpch-instantiate-templates)
    else
      out="$tmp/$h.hpp.gch" pch_flags=()
    fi
    build[$h]=$(user_seconds "$cxx" "${flags[@]}" "${pch_flags[@]}" -x c++-header "$tmp/$h.hpp" -o "$out")
  done
  a=() f=() r=()
  for ((i = 0; i < runs; ++i)); do
    for h in arrays ferry; do
      if [[ "$cxx" == *clang* ]]; then use=(-include-pch "$tmp/$h.hpp.pch"); else use=(-include "$tmp/$h.hpp" -Winvalid-pch -Werror=invalid-pch); fi
      s=$(user_seconds "$cxx" "${flags[@]}" "${use[@]}" -c "$tmp/empty.cpp" -o "$tmp/empty.o")
      if [[ $h == arrays ]]; then a+=("$s"); else f+=("$s"); fi
    done
    r+=("$(awk -v x="${f[i]}" -v y="${a[i]}" 'BEGIN { printf "%.3f", x / y }')")
  done
  declare -A funcs=([arrays]="" [ferry]="")
  if [[ "$cxx" != *clang* ]]; then
    for h in arrays ferry; do
      rm -rf "$tmp/dump" && mkdir "$tmp/dump"
      (cd "$tmp/dump" && "$cxx" "${flags[@]}" -include "$tmp/$h.hpp" -c "$tmp/empty.cpp" \
         -o "$tmp/empty.o" -fdump-tree-original -dumpdir ./ 2>/dev/null)
      d=("$tmp"/dump/*.original)
      funcs[$h]="$(grep -c '^;; Function' "${d[0]}") ($(awk -v b="$(wc -c <"${d[0]}")" \
        'BEGIN { printf "%.1f", b / 1e6 }'))"
    done
  fi
  unit[$cxx]=$(median "${f[@]}")
  printf '| %s | ferry/arrays.hpp | %.2f | %s | 1 | %s |\n' "$cxx" "${build[arrays]}" \
    "$(median "${a[@]}")" "${funcs[arrays]}"
  printf '| %s | ferry/ferry.hpp | %.2f | %s | %sx | %s |\n' "$cxx" "${build[ferry]}" \
    "${unit[$cxx]}" "$(median "${r[@]}")" "${funcs[ferry]}"
  unset funcs
  unset build
done
if [[ -n "${unit[g++]:-}" && -n "${unit[clang++]:-}" ]]; then
  echo
  awk -v g="${unit[g++]}" -v c="${unit[clang++]}" \
    'BEGIN { printf "g++ / clang++, the empty unit on ferry/ferry.hpp: %.1fx\n", g / c }'
fi
