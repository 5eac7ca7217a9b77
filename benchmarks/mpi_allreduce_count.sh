#!/bin/sh
# Instructions of one all-reduce call of 1 KiB over 2 ranks (or 4), as it returns, counted by
# callgrind on each rank's calling thread (benchmarks/mpi_allreduce.cpp --count=N): ferry::all_reduce
# beside MPI_Iallreduce (MPI's own non-blocking all-reduce: a schedule of messages started) in
# the same run, with their ratio, and the part of ferry's call that is MPI's (the MPI_Isend and
# MPI_Irecv it posts). At 1 KiB an all-reduce's time is its calls' cost: this is the figure that
# a wall clock shared by two ranks and their threads on two cores measures too noisily.
#   usage: benchmarks/mpi_allreduce_count.sh [build dir] [calls] [ranks]
#   (default build/release, 200 calls, 2 ranks; half a minute at 2 ranks)
set -eu
build=${1:-build/release}
calls=${2:-200}
ranks=${3:-2}
exe="$build/benchmarks/mpi_allreduce"
[ -x "$exe" ] || { echo "no $exe: build the target mpi_allreduce (needs MPI)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# count NAME FUNCTION: a run under callgrind that counts only inside FUNCTION (and what it calls)
# on each rank's calling thread, into $dir/NAME.<pid>-01
count() {
  mpiexec -n "$ranks" valgrind --tool=callgrind --separate-threads=yes --collect-atstart=no \
    "--toggle-collect=*::$2(*" --callgrind-out-file="$dir/$1.%p" "$exe" --count="$calls" \
    >/dev/null 2>&1
}
count ferry ferry_call
count mpi mpi_call

# total FILE: the instructions counted in FILE
total() { sed -n 's/^summary: *//p;s/^totals: *//p' "$1" | head -n 1; }
# posts FILE: the instructions of the MPI_Isend and MPI_Irecv calls in FILE
posts() {
  callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$1" 2>/dev/null |
    grep -E ':PMPI_I(send|recv) ' | awk '{ gsub(",", "", $1); s += $1 } END { print s + 0 }'
}

printf '%-5s %-26s %8s   %-22s %8s   %-6s   %s\n' rank ferry Ir/call baseline Ir/call ratio \
  "of which MPI_Isend + MPI_Irecv"
set -- "$dir"/mpi.*-01
rank=0
for f in "$dir"/ferry.*-01; do  # both lists by pid: rank order, as mpiexec starts them
  awk -v r="$rank" -v f="$(total "$f")" -v m="$(total "$1")" -v p="$(posts "$f")" -v n="$calls" \
    'BEGIN { printf "%-5d %-26s %8d   %-22s %8d   %5.1fx   %d\n", r, "ferry::all_reduce (call)",
             f / n, "MPI_Iallreduce (call)", m / n, (m > 0 ? f / m : 0), p / n }'
  shift
  rank=$((rank + 1))
done
