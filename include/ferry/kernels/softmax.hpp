#pragma once
// Softmax along one axis, shifted by the maximum so exp never overflows.

#include <cmath>
#include <cstdint>

#include "ferry/kernels/convert.hpp"

namespace ferry::kernels {

/// For each (outer, inner) position, softmax over the middle axis of `axis_size` elements
/// (stride `inner`). Computed in compute_t (float for bfloat16).
template <class T>
void softmax(const T* in, T* out, std::int64_t outer, std::int64_t axis_size, std::int64_t inner) {
  using C = compute_t<T>;
  if (axis_size == 0) return;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      const T* x = in + o * axis_size * inner + j;
      T* y = out + o * axis_size * inner + j;
      C max = static_cast<C>(x[0]);
      for (std::int64_t i = 1; i < axis_size; ++i) {
        const C v = static_cast<C>(x[i * inner]);
        if (v > max || v != v) max = v;
      }
      C sum = 0;
      for (std::int64_t i = 0; i < axis_size; ++i) sum += std::exp(static_cast<C>(x[i * inner]) - max);
      for (std::int64_t i = 0; i < axis_size; ++i) {
        y[i * inner] = static_cast<T>(std::exp(static_cast<C>(x[i * inner]) - max) / sum);
      }
    }
  }
}

}  // namespace ferry::kernels
