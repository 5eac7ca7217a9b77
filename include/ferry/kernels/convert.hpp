#pragma once
// Element conversion, with every case defined: no conversion in ferry is undefined behaviour.

#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ferry/core/bfloat16.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// The type arithmetic on `T` is done in: float for bfloat16, `T` itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

/// `d` rounded to the nearest bfloat16, ties to even, in one rounding. Going through float
/// would round twice; rounding to float *to odd* first keeps the second rounding correct
/// because float carries more than two extra bits.
inline bfloat16 bfloat16_from_double(double d) noexcept {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    if (std::abs(static_cast<double>(f)) > std::abs(d)) {
      f = std::nextafter(f, 0.0f);  // truncate toward zero
    }
    f = std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1U);  // mark inexact: to odd
  }
  return bfloat16(f);
}

/// `i` rounded to the nearest bfloat16, ties to even, in one rounding. Going through double
/// would round twice (2^62 + 2^54 + 1 becomes the tie 2^62 + 2^54, which then rounds down to
/// even), so keep the top 24 significant bits and fold the rest into the last one (rounding to
/// odd, as above): an exact float that float -> bfloat16 then rounds correctly.
inline bfloat16 bfloat16_from_int64(std::int64_t i) noexcept {
  const bool negative = i < 0;
  std::uint64_t magnitude =
      negative ? 0 - static_cast<std::uint64_t>(i) : static_cast<std::uint64_t>(i);
  int shift = 0;
  if (const auto width = static_cast<int>(std::bit_width(magnitude)); width > 24) {
    shift = width - 24;
    const bool sticky = (magnitude & ((std::uint64_t{1} << shift) - 1)) != 0;
    magnitude = (magnitude >> shift) | (sticky ? 1U : 0U);
  }
  const float f = std::ldexp(static_cast<float>(magnitude), shift);  // exact: 24 bits, < 2^64
  return bfloat16(negative ? -f : f);
}

/// `x` converted to `To`:
/// - to bool: `x != 0` (NaN is true);
/// - floating to integer: truncation toward zero, saturating at the limits, NaN to 0;
/// - integer to narrower integer: two's-complement wrap-around (as C++20 defines it);
/// - to bfloat16: round to nearest even, in a single rounding from any source type.
template <class To, class From>
To convert_value(From x) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<compute_t<From>>(x) != compute_t<From>(0);
  } else if constexpr (std::is_same_v<From, bool>) {
    return To(x ? 1.0f : 0.0f);
  } else if constexpr (std::is_same_v<From, bfloat16>) {
    return convert_value<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bfloat16>) {
    if constexpr (std::is_same_v<From, float>) {
      return bfloat16(x);
    } else if constexpr (std::is_same_v<From, std::int64_t>) {
      return bfloat16_from_int64(x);
    } else {
      return bfloat16_from_double(static_cast<double>(x));
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (std::isnan(x)) return 0;
    // Limits as From: max() of int64 is not representable in float/double, but 2^63 is.
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From hi = -lo;  // 2^(bits-1): the first value past max()
    if (x <= lo) return std::numeric_limits<To>::min();
    if (x >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

/// out[i] = convert_value<To>(in[i]) for i < n, split over `runner` in ranges of
/// chunk_elements(). Does not throw.
template <class From, class To>
void convert(const From* in, To* out, std::size_t n, const ChunkRunner& runner = inline_runner()) noexcept {
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(sizeof(From) + sizeof(To)),
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 const From* src = in + begin;
                 To* dst = out + begin;
                 const std::int64_t len = end - begin;
                 for (std::int64_t i = 0; i < len; ++i) dst[i] = convert_value<To>(src[i]);
               });
}

}  // namespace ferry::kernels
