#pragma once
// Softmax along one axis, shifted by the maximum so exp never overflows. Rows (or, along a
// strided axis, blocks of columns) are independent, so the kernel splits over them; each
// value's sum is taken in order along the axis, whatever the split.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

}  // namespace ferry::kernels

namespace ferry::detail {

/// Columns a strided softmax handles at once: their maxima and sums live on the stack.
inline constexpr std::int64_t kSoftmaxColumns = 256;

/// Softmax of the contiguous row x[0, n) into y.
template <class T>
void softmax_row(const T* x, T* y, std::int64_t n) noexcept {
  using C = kernels::compute_t<T>;
  C max = static_cast<C>(x[0]);
  for (std::int64_t i = 1; i < n; ++i) {
    const C v = static_cast<C>(x[i]);
    if (v > max || v != v) max = v;
  }
  C sum = 0;
  if constexpr (std::is_same_v<C, T>) {
    // y holds each exponential exactly (no rounding to a narrower T), so compute it once.
    for (std::int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - max);
    for (std::int64_t i = 0; i < n; ++i) sum += y[i];
    for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] / sum;
  } else {
    for (std::int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<C>(x[i]) - max);
    for (std::int64_t i = 0; i < n; ++i)
      y[i] = static_cast<T>(std::exp(static_cast<C>(x[i]) - max) / sum);
  }
}

/// Softmax along a strided axis for the `n` adjacent columns at x (stride `inner` between the
/// `axis_size` values of one column), with the loops over columns innermost.
template <class T>
void softmax_columns(const T* x, T* y, std::int64_t axis_size, std::int64_t inner,
                     std::int64_t n) noexcept {
  using C = kernels::compute_t<T>;
  std::array<C, kSoftmaxColumns> max;
  std::array<C, kSoftmaxColumns> sum;
  for (std::int64_t j = 0; j < n; ++j) max[static_cast<std::size_t>(j)] = static_cast<C>(x[j]);
  for (std::int64_t i = 1; i < axis_size; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const C v = static_cast<C>(x[i * inner + j]);
      C& m = max[static_cast<std::size_t>(j)];
      if (v > m || v != v) m = v;
    }
  }
  std::fill(sum.begin(), sum.begin() + n, C(0));
  for (std::int64_t i = 0; i < axis_size; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>(j);
      sum[k] += std::exp(static_cast<C>(x[i * inner + j]) - max[k]);
    }
  }
  for (std::int64_t i = 0; i < axis_size; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>(j);
      y[i * inner + j] =
          static_cast<T>(std::exp(static_cast<C>(x[i * inner + j]) - max[k]) / sum[k]);
    }
  }
}

}  // namespace ferry::detail

namespace ferry::kernels {

/// For each (outer, inner) position, softmax over the middle axis of `axis_size` elements
/// (stride `inner`). Computed in compute_t (float for the 16-bit floats), split over `runner`.
/// Does not throw.
template <class T>
void softmax(const T* in, T* out, std::int64_t outer, std::int64_t axis_size, std::int64_t inner,
             const ChunkRunner& runner = inline_runner()) noexcept {
  if (axis_size == 0 || outer == 0 || inner == 0) return;
  // About six passes of work an element (exp dominates): a smaller chunk pays off.
  const std::int64_t elements = std::max<std::int64_t>(chunk_elements(2 * sizeof(T)) / 4, 1);
  if (inner == 1) {
    parallel_for(runner, outer, std::max<std::int64_t>(elements / axis_size, 1),
                 [&](std::int64_t begin, std::int64_t end) noexcept {
                   for (std::int64_t o = begin; o < end; ++o) {
                     detail::softmax_row(in + o * axis_size, out + o * axis_size, axis_size);
                   }
                 });
    return;
  }
  const std::int64_t blocks = (inner + detail::kSoftmaxColumns - 1) / detail::kSoftmaxColumns;
  const std::int64_t per_item = axis_size * std::min(inner, detail::kSoftmaxColumns);
  parallel_for(runner, outer * blocks, std::max<std::int64_t>(elements / per_item, 1),
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 for (std::int64_t item = begin; item < end; ++item) {
                   const std::int64_t o = item / blocks;
                   const std::int64_t j0 = (item % blocks) * detail::kSoftmaxColumns;
                   const std::int64_t at = o * axis_size * inner + j0;
                   detail::softmax_columns(in + at, out + at, axis_size, inner,
                                           std::min(detail::kSoftmaxColumns, inner - j0));
                 }
               });
}

}  // namespace ferry::kernels
