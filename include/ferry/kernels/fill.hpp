#pragma once
// Kernels that create values from nothing: a constant fill and an arithmetic progression.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// out[i] = value for i < n, split over `runner`. Does not throw.
template <class T>
void fill(T* out, std::size_t n, T value, const ChunkRunner& runner = inline_runner()) noexcept {
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(sizeof(T)),
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 std::fill(out + begin, out + end, value);
               });
}

/// out[i] = start + i * step for i < n, computed in double and converted once per element so
/// a long float progression does not accumulate rounding error. Does not throw.
template <class T>
void iota(T* out, std::size_t n, double start, double step,
          const ChunkRunner& runner = inline_runner()) noexcept {
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(sizeof(T)),
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 for (std::int64_t i = begin; i < end; ++i) {
                   out[i] = convert_value<T>(start + static_cast<double>(i) * step);
                 }
               });
}

/// Integer progression, exact (and wrapping like every integer op). Does not throw.
template <class T>
void iota_int(T* out, std::size_t n, std::int64_t start, std::int64_t step,
              const ChunkRunner& runner = inline_runner()) noexcept {
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(sizeof(T)),
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 // Unsigned, so the product and the sum wrap instead of overflowing.
                 auto v = static_cast<std::uint64_t>(start) +
                          static_cast<std::uint64_t>(begin) * static_cast<std::uint64_t>(step);
                 for (std::int64_t i = begin; i < end; ++i, v += static_cast<std::uint64_t>(step)) {
                   out[i] = static_cast<T>(static_cast<std::int64_t>(v));
                 }
               });
}

}  // namespace ferry::kernels
