#pragma once
// for_each_run: walks an output shape in row-major order while tracking where each operand's
// element sits under its own strides (0 for a broadcast dimension). Dimensions that every
// operand walks contiguously are merged first, so equal shapes become one flat run and the
// inner loop the caller writes is a plain loop the compiler vectorizes.

#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/core/shape.hpp"

namespace ferry::kernels {

/// An operand's strides under the output shape (detail::broadcast_strides gives them).
using detail::Strides;

/// Calls `run(offsets, steps, count)` once per inner run of the output: `count` elements whose
/// operand k sits at `offsets[k] + i * steps[k]` for i < count, and whose output position is
/// offsets[0] + i when operand 0 is the contiguous output itself.
template <std::size_t N, class Run>
void for_each_run(const Shape& shape, const std::array<Strides, N>& strides, Run&& run) {
  if (shape.numel() == 0) return;
  // Coalesce: merge dimension d into d-1 when every operand steps over d-1 exactly as far as
  // a whole run of d takes it. Size-1 dimensions are dropped outright.
  std::array<std::int64_t, kMaxRank> size{};
  std::array<Strides, N> st{};
  std::size_t rank = 0;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const std::int64_t n = shape.dims()[d];
    if (n == 1) continue;
    bool merge = rank > 0;
    for (std::size_t k = 0; k < N && merge; ++k) {
      merge = st[k][rank - 1] == strides[k][d] * n;
    }
    if (merge) {
      size[rank - 1] *= n;
      for (std::size_t k = 0; k < N; ++k) st[k][rank - 1] = strides[k][d];
    } else {
      size[rank] = n;
      for (std::size_t k = 0; k < N; ++k) st[k][rank] = strides[k][d];
      ++rank;
    }
  }
  std::array<std::int64_t, N> offsets{};
  if (rank == 0) {  // a single element
    std::array<std::int64_t, N> steps{};
    run(offsets, steps, std::int64_t{1});
    return;
  }
  const std::size_t inner = rank - 1;
  std::array<std::int64_t, N> steps{};
  for (std::size_t k = 0; k < N; ++k) steps[k] = st[k][inner];
  // Odometer over the outer dimensions; offsets follow it incrementally.
  std::array<std::int64_t, kMaxRank> index{};
  for (;;) {
    run(offsets, steps, size[inner]);
    std::size_t d = inner;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < size[d]) {
        for (std::size_t k = 0; k < N; ++k) offsets[k] += st[k][d];
        break;
      }
      for (std::size_t k = 0; k < N; ++k) offsets[k] -= st[k][d] * (size[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace ferry::kernels
