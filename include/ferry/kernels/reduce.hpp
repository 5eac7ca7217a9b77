#pragma once
// Reductions over any set of axes (sum, mean, max, min) and argmax over one axis.
// Sums accumulate floating values in double and integers in wrapping unsigned arithmetic;
// max and min propagate NaN; argmax returns the first maximum (the first NaN if there is one).

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ferry/core/shape.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

enum class ReduceOp : std::uint8_t { sum, mean, max, min };

/// What a reduction of `T` accumulates in: double for floating types, wrapping unsigned for
/// integers.
template <class T>
struct reduce_acc {
  using type = double;
};
template <>
struct reduce_acc<std::int32_t> {
  using type = std::uint32_t;
};
template <>
struct reduce_acc<std::int64_t> {
  using type = std::uint64_t;
};

/// Reduces `in` (of `shape`) over the dimensions flagged in `reduced` into `out`, which holds
/// the kept dimensions in order. Every output element folds its inputs in row-major order.
template <class T>
void reduce(const T* in, T* out, const Shape& shape, const std::array<bool, kMaxRank>& reduced,
            ReduceOp op) {
  using Acc = typename reduce_acc<T>::type;
  // Output strides in input-dimension order: 0 along a reduced dimension.
  Strides out_strides{};
  std::int64_t out_count = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    out_strides[d] = reduced[d] ? 0 : out_count;
    if (!reduced[d]) out_count *= shape.dims()[d];
  }
  const std::int64_t per_output = out_count == 0 ? 0 : shape.numel() / out_count;

  Acc init{};
  if (op == ReduceOp::max) init = std::numeric_limits<Acc>::lowest();
  if (op == ReduceOp::min) init = std::numeric_limits<Acc>::max();
  if constexpr (std::numeric_limits<Acc>::has_infinity) {
    if (op == ReduceOp::max) init = -std::numeric_limits<Acc>::infinity();
    if (op == ReduceOp::min) init = std::numeric_limits<Acc>::infinity();
  }
  if constexpr (is_int_v<T>) {  // Acc is unsigned for sums; max and min compare signed values
    if (op == ReduceOp::max) init = static_cast<Acc>(std::numeric_limits<T>::lowest());
    if (op == ReduceOp::min) init = static_cast<Acc>(std::numeric_limits<T>::max());
  }
  std::vector<Acc> acc(static_cast<std::size_t>(out_count), init);

  auto combine = [op](Acc a, Acc x) -> Acc {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean: return a + x;  // unsigned wraps, double is exact enough
      case ReduceOp::max:
        if constexpr (is_int_v<T>) return Maximum{}(T(a), T(x)) == T(a) ? a : x;
        else return Maximum{}(a, x);
      case ReduceOp::min:
        if constexpr (is_int_v<T>) return Minimum{}(T(a), T(x)) == T(a) ? a : x;
        else return Minimum{}(a, x);
    }
    return a;
  };
  const std::array<Strides, 2> strides{detail::row_major_strides(shape), out_strides};
  for_each_run(shape, strides, [&](const auto& off, const auto& step, std::int64_t n) {
    const T* src = in + off[0];
    Acc* dst = acc.data() + off[1];
    if (step[1] == 0) {
      Acc a = *dst;
      for (std::int64_t i = 0; i < n; ++i) a = combine(a, static_cast<Acc>(src[i]));
      *dst = a;
    } else {
      for (std::int64_t i = 0; i < n; ++i) dst[i] = combine(dst[i], static_cast<Acc>(src[i]));
    }
  });
  for (std::size_t i = 0; i < acc.size(); ++i) {
    Acc v = acc[i];
    if constexpr (std::is_floating_point_v<Acc>) {
      if (op == ReduceOp::mean) v /= static_cast<Acc>(per_output);  // 0/0 is NaN, as in NumPy
    }
    out[i] = convert_value<T>(v);
  }
}

/// For each (outer, inner) position, the index along the middle axis (of `axis_size`) of the
/// first largest value, or of the first NaN.
template <class T>
void argmax(const T* in, std::int64_t* out, std::int64_t outer, std::int64_t axis_size,
            std::int64_t inner) {
  using C = compute_t<T>;
  std::vector<C> best(static_cast<std::size_t>(inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* base = in + o * axis_size * inner;
    std::int64_t* idx = out + o * inner;
    for (std::int64_t j = 0; j < inner; ++j) {
      best[static_cast<std::size_t>(j)] = static_cast<C>(base[j]);
      idx[j] = 0;
    }
    for (std::int64_t i = 1; i < axis_size; ++i) {
      const T* row = base + i * inner;
      for (std::int64_t j = 0; j < inner; ++j) {
        C& b = best[static_cast<std::size_t>(j)];
        const C v = static_cast<C>(row[j]);
        if (!is_nan(b) && (v > b || is_nan(v))) {
          b = v;
          idx[j] = i;
        }
      }
    }
  }
}

}  // namespace ferry::kernels
