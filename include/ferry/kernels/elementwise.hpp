#pragma once
// Elementwise kernels: a unary map, a broadcasting binary zip, and the three-way select of
// `where`. Values are computed in compute_t (float for bfloat16) and rounded once on store.

#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/core/shape.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// out[i] = op(in[i]) for i < n.
template <class T, class R, class Op>
void map(const T* in, R* out, std::size_t n, Op op) {
  using C = compute_t<T>;
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<R>(op(static_cast<C>(in[i])));
}

/// out[i] = op(a[i], b[i]) for i < n: operands of one shape.
template <class T, class R, class Op>
void zip(const T* a, const T* b, R* out, std::size_t n, Op op) {
  using C = compute_t<T>;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<R>(op(static_cast<C>(a[i]), static_cast<C>(b[i])));
  }
}

/// out = op(a, b) over the broadcast `shape`, reading a and b through `sa` and `sb`.
template <class T, class R, class Op>
void zip_broadcast(const T* a, const T* b, R* out, const Shape& shape, const Strides& sa,
                   const Strides& sb, Op op) {
  using C = compute_t<T>;
  const std::array<Strides, 3> strides{detail::row_major_strides(shape), sa, sb};
  for_each_run(shape, strides, [&](const auto& off, const auto& step, std::int64_t n) {
    R* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    // The inner dimension is contiguous or broadcast for each side; give the compiler a
    // loop it can vectorize for each of those cases.
    if (step[1] == 1 && step[2] == 1) {
      for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(op(C(pa[i]), C(pb[i])));
    } else if (step[1] == 1 && step[2] == 0) {
      const C vb = static_cast<C>(*pb);
      for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(op(C(pa[i]), vb));
    } else if (step[1] == 0 && step[2] == 1) {
      const C va = static_cast<C>(*pa);
      for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(op(va, C(pb[i])));
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        o[i] = static_cast<R>(op(C(pa[i * step[1]]), C(pb[i * step[2]])));
      }
    }
  });
}

/// out = mask ? a : b over the broadcast `shape`.
template <class T>
void select(const bool* mask, const T* a, const T* b, T* out, const Shape& shape,
            const Strides& sm, const Strides& sa, const Strides& sb) {
  const std::array<Strides, 4> strides{detail::row_major_strides(shape), sm, sa, sb};
  for_each_run(shape, strides, [&](const auto& off, const auto& step, std::int64_t n) {
    T* o = out + off[0];
    const bool* pm = mask + off[1];
    const T* pa = a + off[2];
    const T* pb = b + off[3];
    for (std::int64_t i = 0; i < n; ++i) {
      o[i] = pm[i * step[1]] ? pa[i * step[2]] : pb[i * step[3]];
    }
  });
}

}  // namespace ferry::kernels
