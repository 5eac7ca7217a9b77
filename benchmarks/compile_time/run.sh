#!/usr/bin/env bash
# Compile-time benchmark (issue 27): how long a unit that includes ferry takes to compile,
# against a baseline compiled in the same run.
#
#   benchmarks/compile_time/run.sh [--runs N] [--compiler g++|clang++] [--opt O0|O2]
#
# Defaults: 3 runs, g++ (the compiler the issue measured), -O0 and -O2: 36 compiles of ferry
# and as many of the baseline, about 8 minutes on the 2-core machine when quiet. Give
# `--compiler g++ --compiler clang++` for both compilers (twice as long), `--opt O0` for -O0
# alone (about 3 minutes).
# Each program is compiled with `-c` to an object file in a temporary folder,
# `-std=c++20 -O<level> -I<repo>/include`, nothing else (the baseline adds only its include
# path), one compile at a time. Each round compiles, for every program in turn, the baseline
# and then the program, so each compile of a program has its own compile of the baseline just
# before it. Seconds are wall seconds (with CPU seconds, user + system, beside them), medians
# of the N runs (the baseline's of all its runs); a ratio is the median of the N ratios of a
# program's compile to the compile paired with it (the baseline's just before it, or its
# ferry/ferry.hpp twin's of the same round), with their range, and the median CPU ratio beside
# it: the machine is shared, and its load moves the wall seconds far more than the CPU ones.
#
# The programs:
#   hello.cpp          the README's first snippet, including ferry/ferry.hpp (everything)
#   hello_arrays.cpp   the same, including only the entry header ferry/arrays.hpp
#   train.cpp          an MLP, cross-entropy, nn::value_and_grad, Adam, a safetensors round
#                      trip, including ferry/ferry.hpp
#   train_entry.cpp    the same, including only the entry header ferry/nn.hpp
#   hello_separate     hello_arrays.cpp compiled with -DFERRY_SEPARATE_COMPILATION: the
#                      model and the common op instantiations come from ferry/src.hpp,
#                      compiled once per program (its time is printed apart, below the table)
#   train_separate     train_entry.cpp, the same way
# The baseline: taskflow_hello.cpp (Taskflow's two-task hello world) when
# <taskflow/taskflow.hpp> is found, on the compiler's include paths or under
# $TASKFLOW_INCLUDE; else eigen_hello.cpp (an Eigen dense program of hello's shape, from
# libeigen3-dev). Neither is installed by this script.
#
# What the issue measured, to relate one baseline to the other: at -O0 (g++), on a quiet
# machine on the day of the issue, Taskflow's hello compiled in 4.9 s, Eigen's in 2.7 s and
# ferry's hello in 15.4 s: ferry's hello was 3.1x Taskflow's and 5.7x Eigen's. A ratio to Eigen
# is 1.8x (4.9 / 2.7) the ratio to Taskflow of the same compile: multiply it by 0.55 to compare.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

runs=3
compilers=()
opts=()
usage() { sed -n '5p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage; runs="$2"; shift 2 ;;
    --compiler) [[ $# -ge 2 ]] || usage; compilers+=("$2"); shift 2 ;;
    --opt) [[ $# -ge 2 && "$2" =~ ^O[0-3s]$ ]] || usage; opts+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage ;;
  esac
done
explicit_compiler=1
if [[ ${#compilers[@]} -eq 0 ]]; then compilers=(g++); explicit_compiler=0; fi
[[ ${#opts[@]} -eq 0 ]] && opts=(O0 O2)

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ferry_compile_time.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf '#include <ferry/src.hpp>\n' >"$tmp/ferry_src.cpp"

# ferry's programs: name, source, the header it includes, and the program it is compared with
# (its full-header twin; empty for the full-header programs themselves).
programs=(hello hello_arrays hello_separate train train_entry train_separate)
declare -A header=([hello]=ferry/ferry.hpp [hello_arrays]=ferry/arrays.hpp
                   [hello_separate]="ferry/arrays.hpp, separate"
                   [train]=ferry/ferry.hpp [train_entry]=ferry/nn.hpp
                   [train_separate]="ferry/nn.hpp, separate")
declare -A twin=([hello_arrays]=hello [hello_separate]=hello [train_entry]=train
                 [train_separate]=train)
# The source of a program, where it is not <name>.cpp, and the flags it adds to the common ones.
declare -A source=([hello_separate]=hello_arrays [train_separate]=train_entry [ferry_src]=ferry_src)
declare -A extra_flags=([hello_separate]=-DFERRY_SEPARATE_COMPILATION
                        [train_separate]=-DFERRY_SEPARATE_COMPILATION
                        [ferry_src]=-DFERRY_SEPARATE_COMPILATION)

# Does `$1` (a compiler) with flags `${@:2}` see the header named by $hdr?
has_header() {
  local cxx="$1"; shift
  printf '#if !__has_include(<%s>)\n#error missing\n#endif\n' "$hdr" |
    "$cxx" -std=c++20 "$@" -x c++ -fsyntax-only - >/dev/null 2>&1
}

# Sets baseline, baseline_label and baseline_flags for compiler $1, or returns 1.
find_baseline() {
  local cxx="$1" hdr
  hdr=taskflow/taskflow.hpp baseline_header="<taskflow/taskflow.hpp>"
  if [[ -n "${TASKFLOW_INCLUDE:-}" ]]; then
    # The folder holding taskflow/, or taskflow/ itself.
    local dir="$TASKFLOW_INCLUDE"
    [[ -f "$dir/taskflow.hpp" && ! -f "$dir/taskflow/taskflow.hpp" ]] && dir="$(dirname "$dir")"
    if has_header "$cxx" -I"$dir"; then
      baseline=taskflow_hello; baseline_label="Taskflow's hello (-I$dir)"
      baseline_flags=(-I"$dir"); return 0
    fi
  fi
  if has_header "$cxx"; then
    baseline=taskflow_hello; baseline_label="Taskflow's hello"; baseline_flags=(); return 0
  fi
  hdr=Eigen/Dense baseline_header="<Eigen/Dense>"
  local eigen_flags=()
  if command -v pkg-config >/dev/null && pkg-config --exists eigen3 2>/dev/null; then
    read -r -a eigen_flags <<<"$(pkg-config --cflags-only-I eigen3)"
  else
    eigen_flags=(-I/usr/include/eigen3)
  fi
  if has_header "$cxx" "${eigen_flags[@]}"; then
    baseline=eigen_hello; baseline_label="Eigen's hello (Taskflow not found)"
    baseline_flags=("${eigen_flags[@]}"); return 0
  fi
  return 1
}

# Compiles program $1 with compiler $2 at level $3; sets `wall` and `cpu` (user + system, of
# the compiler and its children) to the seconds it took. Exits the script if it fails.
time_compile() {
  local name="$1" cxx="$2" opt="$3" flags=() more=() user sys TIMEFORMAT='%3R %3U %3S'
  if [[ "$name" == "$baseline" ]]; then flags=("${baseline_flags[@]}"); else flags=(-I"$repo/include"); fi
  if [[ -n "${extra_flags[$name]:-}" ]]; then read -r -a more <<<"${extra_flags[$name]}"; flags+=("${more[@]}"); fi
  local src="$here/${source[$name]:-$name}.cpp"
  [[ "$name" == ferry_src ]] && src="$tmp/ferry_src.cpp"
  if ! { time "$cxx" -std=c++20 "-$opt" "${flags[@]}" -c "$src" -o "$tmp/$name.o" \
           2>"$tmp/err" >/dev/null; } 2>"$tmp/time"; then
    echo "error: $cxx -$opt failed on $src:" >&2; head -40 "$tmp/err" >&2; exit 1
  fi
  read -r wall user sys <"$tmp/time"
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }')
  rm -f "$tmp/$name.o"
}

# The median of the numbers given (one a word).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
  if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The ratios $1[i] / $2[i] of two lists of numbers (space-separated strings), one a line.
ratios() { paste -d' ' <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) |
  awk '{ printf "%.4f\n", $1 / $2 }'; }
# "1.23x, runs 1.10x to 1.40x (CPU 1.20x)": the median of the wall ratios $1 / $2 with their
# range, and the median of the CPU ratios $3 / $4.
ratio_text() {
  local w c m
  mapfile -t w < <(ratios "$1" "$2")
  mapfile -t c < <(ratios "$3" "$4")
  m=$(median "${w[@]}")
  if [[ ${#w[@]} -eq 1 ]]; then printf '%.2fx' "$m"
  else printf '%s\n' "${w[@]}" | sort -g | awk -v m="$m" '{ v[NR] = $1 } END {
         printf "%.2fx, runs %.2fx to %.2fx", m, v[1], v[NR] }'; fi
  printf ' (CPU %.2fx)' "$(median "${c[@]}")"
}

echo "ferry compile time, $(date '+%Y-%m-%d %H:%M'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "each compile: <compiler> -std=c++20 -O<level> -I$repo/include -c <program>.cpp"
status=0
for cxx in "${compilers[@]}"; do
  if ! command -v "$cxx" >/dev/null; then
    echo "$cxx: not found, skipped" >&2
    [[ $explicit_compiler -eq 1 ]] && status=1
    continue
  fi
  if ! find_baseline "$cxx"; then
    echo "error: no baseline for $cxx: neither <taskflow/taskflow.hpp> (set TASKFLOW_INCLUDE) nor" \
         "<Eigen/Dense> (apt-get install libeigen3-dev) was found" >&2
    exit 1
  fi
  version=$("$cxx" --version | head -1)
  for opt in "${opts[@]}"; do
    # wall_s[p] / cpu_s[p]: program p's seconds, one a round; base_*[p]: the baseline's
    # compile just before p's in the same round; all_base_*: every compile of the baseline.
    declare -A wall_s=() cpu_s=() base_wall=() base_cpu=()
    all_base_wall=() all_base_cpu=()
    for ((r = 1; r <= runs; ++r)); do
      for name in "${programs[@]}"; do
        time_compile "$baseline" "$cxx" "$opt"
        base_wall[$name]+="$wall " base_cpu[$name]+="$cpu "
        all_base_wall+=("$wall") all_base_cpu+=("$cpu")
        time_compile "$name" "$cxx" "$opt"
        wall_s[$name]+="$wall " cpu_s[$name]+="$cpu "
      done
    done
    echo
    echo "$version, -$opt, medians of $runs runs; baseline: $baseline_label"
    echo
    echo "| program | includes | seconds (CPU) | / $baseline | / the same with ferry/ferry.hpp |"
    echo "|---|---|---|---|---|"
    printf '| %s | %s | %.2f (%.2f) | 1 | |\n' "$baseline" "$baseline_header" \
      "$(median "${all_base_wall[@]}")" "$(median "${all_base_cpu[@]}")"
    for name in "${programs[@]}"; do
      to_twin=""
      if [[ -n "${twin[$name]:-}" ]]; then
        t="${twin[$name]}"
        to_twin="$name / $t: $(ratio_text "${wall_s[$name]}" "${wall_s[$t]}" "${cpu_s[$name]}" "${cpu_s[$t]}")"
      fi
      # shellcheck disable=SC2086  # the lists of seconds are split into words on purpose
      printf '| %s | %s | %.2f (%.2f) | %s | %s |\n' "$name" "${header[$name]}" \
        "$(median ${wall_s[$name]})" "$(median ${cpu_s[$name]})" \
        "$(ratio_text "${wall_s[$name]}" "${base_wall[$name]}" "${cpu_s[$name]}" "${base_cpu[$name]}")" \
        "$to_twin"
    done
    # What the separate mode pays once per program (per build of ferry::separate), not per unit.
    time_compile ferry_src "$cxx" "$opt"
    printf '\nOnce per program in the separate mode: ferry/src.hpp (the model and the listed\n'
    printf 'instantiations, ferry::separate) compiles in %.2f s (CPU %.2f), once.\n' "$wall" "$cpu"
    unset wall_s cpu_s base_wall base_cpu
  done
done
exit $status
