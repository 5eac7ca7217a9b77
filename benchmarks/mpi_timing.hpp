#pragma once
// What the MPI benchmarks (mpi_allreduce.cpp, mpi_broadcast.cpp) time with: a call's time is the
// largest of the ranks' (its result is there on every rank only then), a figure the median of
// the repetitions.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace ferry_bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The largest of every rank's `x`.
inline double max_over_ranks(double x) {
  double out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace ferry_bench
