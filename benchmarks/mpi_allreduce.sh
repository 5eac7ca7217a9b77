#!/bin/sh
# ferry::all_reduce over MPI processes against MPI_Allreduce (benchmarks/mpi_allreduce.cpp),
# under `mpiexec -n 2` and `-n 4`, as one table. Usage: benchmarks/mpi_allreduce.sh [build dir]
# (default build/release; configure it with -DFERRY_BUILD_BENCHMARKS=ON where MPI is found, and
# build the target mpi_allreduce).
set -eu
build=${1:-build/release}
exe="$build/benchmarks/mpi_allreduce"
[ -x "$exe" ] || { echo "no $exe: build the target mpi_allreduce (needs MPI)" >&2; exit 1; }
# Open MPI refuses to run as root (a container) or more ranks than cores (this machine has 2)
# unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# A run cut short (out of memory at the largest sizes) still shows the rows it printed.
two=$(mpiexec -n 2 "$exe") || echo "mpiexec -n 2 failed ($?): its table is cut short" >&2
four=$(mpiexec -n 4 "$exe" --rows-only) || echo "mpiexec -n 4 failed ($?): its table is cut short" >&2
printf '%s\n' "$two" | grep '^|'
printf '%s\n' "$four" | grep '^|'
echo
printf '%s\n%s\n' "$two" "$four" | grep '^overlap'
