#pragma once
// Kernels that create values from nothing: a constant fill and an arithmetic progression.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ferry/kernels/convert.hpp"

namespace ferry::kernels {

/// out[i] = value for i < n.
template <class T>
void fill(T* out, std::size_t n, T value) noexcept {
  std::fill_n(out, n, value);
}

/// out[i] = start + i * step for i < n, computed in double and converted once per element so
/// a long float progression does not accumulate rounding error.
template <class T>
void iota(T* out, std::size_t n, double start, double step) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = convert_value<T>(start + static_cast<double>(i) * step);
  }
}

/// Integer progression, exact (and wrapping like every integer op).
template <class T>
void iota_int(T* out, std::size_t n, std::int64_t start, std::int64_t step) noexcept {
  auto v = static_cast<std::uint64_t>(start);
  for (std::size_t i = 0; i < n; ++i, v += static_cast<std::uint64_t>(step)) {
    out[i] = static_cast<T>(static_cast<std::int64_t>(v));
  }
}

}  // namespace ferry::kernels
