#pragma once
// Elementwise kernels: a unary map, a broadcasting binary zip, and the three-way select of
// `where`. Values are computed in compute_t (float for bfloat16 and float16) and rounded once
// on store. Each output element depends only on its own inputs, so a kernel splits into ranges of
// chunk_elements() and any runner gives the same bits; inner loops have one contiguous (or
// broadcast) form each, with no index arithmetic, so the compiler vectorizes them.

#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/core/shape.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// out[i] = op(in[i]) for i < n, split over `runner`. Throws what `op` throws.
template <class T, class R, class Op>
void map(const T* in, R* out, std::size_t n, Op op, const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(sizeof(T) + sizeof(R)),
               [&](std::int64_t begin, std::int64_t end) {
                 const T* src = in + begin;
                 R* dst = out + begin;
                 const std::int64_t len = end - begin;
                 for (std::int64_t i = 0; i < len; ++i)
                   dst[i] = static_cast<R>(op(static_cast<C>(src[i])));
               });
}

/// out[i] = op(a[i], b[i]) for i < n: operands of one shape. Throws what `op` throws.
template <class T, class R, class Op>
void zip(const T* a, const T* b, R* out, std::size_t n, Op op,
         const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(2 * sizeof(T) + sizeof(R)),
               [&](std::int64_t begin, std::int64_t end) {
                 const T* pa = a + begin;
                 const T* pb = b + begin;
                 R* dst = out + begin;
                 const std::int64_t len = end - begin;
                 for (std::int64_t i = 0; i < len; ++i) {
                   dst[i] = static_cast<R>(op(static_cast<C>(pa[i]), static_cast<C>(pb[i])));
                 }
               });
}

/// out = op(a, b) over the broadcast `shape`, reading a and b through `sa` and `sb`. Throws
/// what `op` throws.
template <class T, class R, class Op>
void zip_broadcast(const T* a, const T* b, R* out, const Shape& shape, const Strides& sa,
                   const Strides& sb, Op op, const ChunkRunner& runner = inline_runner()) {
  using C = compute_t<T>;
  const std::array<Strides, 3> strides{detail::row_major_strides(shape), sa, sb};
  const std::int64_t grain = chunk_elements(2 * sizeof(T) + sizeof(R));
  parallel_runs(runner, shape, strides, grain,
                [&](const auto& off, const auto& step, std::int64_t n) {
                  R* o = out + off[0];
                  const T* pa = a + off[1];
                  const T* pb = b + off[2];
                  // The inner dimension is contiguous or broadcast for each side; give the compiler
                  // a loop it can vectorize for each of those cases.
                  if (step[1] == 1 && step[2] == 1) {
                    for (std::int64_t i = 0; i < n; ++i)
                      o[i] = static_cast<R>(op(C(pa[i]), C(pb[i])));
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

/// out = mask ? a : b over the broadcast `shape`. Does not throw.
template <class T>
void select(const bool* mask, const T* a, const T* b, T* out, const Shape& shape,
            const Strides& sm, const Strides& sa, const Strides& sb,
            const ChunkRunner& runner = inline_runner()) {
  const std::array<Strides, 4> strides{detail::row_major_strides(shape), sm, sa, sb};
  const std::int64_t grain = chunk_elements(1 + 3 * sizeof(T));
  parallel_runs(runner, shape, strides, grain,
                [&](const auto& off, const auto& step, std::int64_t n) {
                  T* o = out + off[0];
                  const bool* pm = mask + off[1];
                  const T* pa = a + off[2];
                  const T* pb = b + off[3];
                  if (step[1] == 1 && step[2] == 1 && step[3] == 1) {
                    for (std::int64_t i = 0; i < n; ++i) o[i] = pm[i] ? pa[i] : pb[i];
                  } else {
                    for (std::int64_t i = 0; i < n; ++i) {
                      o[i] = pm[i * step[1]] ? pa[i * step[2]] : pb[i * step[3]];
                    }
                  }
                });
}

}  // namespace ferry::kernels
