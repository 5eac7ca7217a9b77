#pragma once
// for_each_run: walks an output shape in row-major order while tracking where each operand's
// element sits under its own strides (0 for a broadcast dimension). Dimensions that every
// operand walks contiguously are merged first, so equal shapes become one flat run and the
// inner loop the caller writes is a plain loop the compiler vectorizes. A walk may start and
// end anywhere in the output, so a kernel splits it into ranges for parallel_for.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/core/shape.hpp"
#include "ferry/kernels/parallel.hpp"

namespace ferry::kernels {

/// An operand's strides under the output shape (detail::broadcast_strides gives them).
using detail::Strides;

/// How much work a kernel hands to one chunk: about this many bytes moved. Measured on the
/// 2-core development machine (see tests/test_parallel_kernels.cpp's header): below ~128 KiB a
/// kernel finishes before a sleeping worker has woken, so one range of this size runs on the
/// calling thread alone and larger kernels split into ranges of it.
inline constexpr std::int64_t kChunkBytes = std::int64_t{192} << 10;

/// Elements of `bytes_per_element` bytes (all operands together) that make one chunk.
constexpr std::int64_t chunk_elements(std::size_t bytes_per_element) noexcept {
  const auto b = static_cast<std::int64_t>(bytes_per_element == 0 ? 1 : bytes_per_element);
  return std::max<std::int64_t>(kChunkBytes / b, 1);
}

}  // namespace ferry::kernels

namespace ferry::detail {

/// A shape with its dimensions merged wherever every operand walks them contiguously (see
/// kernels::for_each_run), and size-1 dimensions dropped. rank 0 means a single element.
template <std::size_t N>
struct Coalesced {
  std::array<std::int64_t, kMaxRank> size{};
  std::array<Strides, N> st{};
  std::size_t rank = 0;
};

template <std::size_t N>
Coalesced<N> coalesce(const Shape& shape, const std::array<Strides, N>& strides) noexcept {
  Coalesced<N> c;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const std::int64_t n = shape.dims()[d];
    if (n == 1) continue;
    bool merge = c.rank > 0;
    for (std::size_t k = 0; k < N && merge; ++k) {
      merge = c.st[k][c.rank - 1] == strides[k][d] * n;
    }
    if (merge) {
      c.size[c.rank - 1] *= n;
      for (std::size_t k = 0; k < N; ++k) c.st[k][c.rank - 1] = strides[k][d];
    } else {
      c.size[c.rank] = n;
      for (std::size_t k = 0; k < N; ++k) c.st[k][c.rank] = strides[k][d];
      ++c.rank;
    }
  }
  return c;
}

}  // namespace ferry::detail

namespace ferry::kernels {

/// Calls `run(offsets, steps, count)` for the inner runs that cover the output elements
/// [begin, end) in row-major order: `count` elements whose operand k sits at
/// `offsets[k] + i * steps[k]` for i < count. The first and last runs may be partial.
template <std::size_t N, class Run>
void for_each_run_in(const Shape& shape, const std::array<Strides, N>& strides, std::int64_t begin,
                     std::int64_t end, Run&& run) {
  if (begin >= end || shape.numel() == 0) return;
  const detail::Coalesced<N> c = detail::coalesce(shape, strides);
  std::array<std::int64_t, N> offsets{};
  std::array<std::int64_t, N> steps{};
  if (c.rank == 0) {  // a single element
    run(offsets, steps, std::int64_t{1});
    return;
  }
  const std::size_t inner = c.rank - 1;
  for (std::size_t k = 0; k < N; ++k) steps[k] = c.st[k][inner];
  // Where `begin` sits: its index along each dimension, divided out from the innermost.
  std::array<std::int64_t, kMaxRank> index{};
  std::int64_t rest = begin;
  for (std::size_t d = c.rank; d-- > 0;) {
    index[d] = rest % c.size[d];
    rest /= c.size[d];
    for (std::size_t k = 0; k < N; ++k) offsets[k] += index[d] * c.st[k][d];
  }
  std::int64_t left = end - begin;
  // The first run starts mid-row; the odometer below only ever moves to a row's start.
  std::int64_t count = std::min(c.size[inner] - index[inner], left);
  for (;;) {
    run(offsets, steps, count);
    left -= count;
    if (left == 0) return;
    for (std::size_t k = 0; k < N; ++k) offsets[k] -= c.st[k][inner] * index[inner];
    index[inner] = 0;
    std::size_t d = inner;
    for (;;) {
      --d;  // never past 0: `left` elements remain inside the shape
      if (++index[d] < c.size[d]) {
        for (std::size_t k = 0; k < N; ++k) offsets[k] += c.st[k][d];
        break;
      }
      for (std::size_t k = 0; k < N; ++k) offsets[k] -= c.st[k][d] * (c.size[d] - 1);
      index[d] = 0;
    }
    count = std::min(c.size[inner], left);
  }
}

/// Calls `run(offsets, steps, count)` once per inner run of the output: `count` elements whose
/// operand k sits at `offsets[k] + i * steps[k]` for i < count, and whose output position is
/// offsets[0] + i when operand 0 is the contiguous output itself.
template <std::size_t N, class Run>
void for_each_run(const Shape& shape, const std::array<Strides, N>& strides, Run&& run) {
  for_each_run_in(shape, strides, 0, shape.numel(), run);
}

/// for_each_run split over `runner`: ranges of `grain` output elements, each walked by
/// for_each_run_in. For kernels whose every output element depends only on its own inputs.
template <std::size_t N, class Run>
void parallel_runs(const ChunkRunner& runner, const Shape& shape,
                   const std::array<Strides, N>& strides, std::int64_t grain, Run&& run) {
  parallel_for(runner, shape.numel(), grain, [&](std::int64_t begin, std::int64_t end) {
    for_each_run_in(shape, strides, begin, end, run);
  });
}

}  // namespace ferry::kernels
