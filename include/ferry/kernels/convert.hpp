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
#include "ferry/core/dtype.hpp"
#include "ferry/core/float16.hpp"
#include "ferry/kernels/parallel.hpp"
#include "ferry/kernels/strided.hpp"

namespace ferry::kernels {

/// The type arithmetic on `T` is done in: float for the 16-bit floating types, `T` itself
/// otherwise.
template <class T>
using compute_t = std::conditional_t<HalfFloating<T>, float, T>;

/// `d` as a float rounded *to odd*: truncated toward zero, with the last mantissa bit set when
/// anything was cut off. A float carries more than two bits past a bfloat16 or a float16
/// (subnormals included), so rounding this float to nearest even again gives the correctly
/// rounded result, where rounding `d` to the nearest float first would round twice.
inline float float_to_odd(double d) noexcept {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    if (std::abs(static_cast<double>(f)) > std::abs(d)) {
      f = std::nextafter(f, 0.0f);  // truncate toward zero
    }
    f = std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1U);  // mark inexact: to odd
  }
  return f;
}

/// `i` as a float rounded to odd, as above. Going through double would round twice
/// (2^62 + 2^54 + 1 becomes the tie 2^62 + 2^54, which then rounds down to even), so keep the
/// top 24 significant bits and fold the rest into the last one: an exact float.
inline float float_to_odd(std::int64_t i) noexcept {
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
  return negative ? -f : f;
}

/// `d` rounded to the nearest bfloat16, ties to even, in one rounding.
inline bfloat16 bfloat16_from_double(double d) noexcept { return bfloat16(float_to_odd(d)); }

/// `i` rounded to the nearest bfloat16, ties to even, in one rounding.
inline bfloat16 bfloat16_from_int64(std::int64_t i) noexcept { return bfloat16(float_to_odd(i)); }

/// `d` rounded to the nearest float16, ties to even, in one rounding (from 65520 up it is
/// infinity; at most 2^-25 in magnitude, a zero of its sign).
inline float16 float16_from_double(double d) noexcept { return float16(float_to_odd(d)); }

/// `i` rounded to the nearest float16, ties to even, in one rounding (infinity from 65520 up).
inline float16 float16_from_int64(std::int64_t i) noexcept { return float16(float_to_odd(i)); }

/// `x` converted to `To`:
/// - to bool: `x != 0` (NaN is true);
/// - floating to integer: truncation toward zero, saturating at the limits (a negative value
///   to uint8 is 0), NaN to 0;
/// - integer to narrower integer, and between signed and unsigned: two's-complement
///   wrap-around (as C++20 defines it: int64 300 is uint8 44, uint8 200 is int8 -56);
/// - to bfloat16 or float16: round to nearest even, in a single rounding from any source type
///   (between the two, through float, which holds either exactly).
template <class To, class From>
To convert_value(From x) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<compute_t<From>>(x) != compute_t<From>(0);
  } else if constexpr (std::is_same_v<From, bool>) {
    return To(x ? 1.0f : 0.0f);
  } else if constexpr (HalfFloating<From>) {
    return convert_value<To>(static_cast<float>(x));
  } else if constexpr (HalfFloating<To>) {
    if constexpr (std::is_same_v<From, float>) {
      return To(x);
    } else if constexpr (std::is_same_v<From, std::int64_t>) {
      return To(float_to_odd(x));
    } else {
      return To(float_to_odd(static_cast<double>(x)));
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (std::isnan(x)) return 0;
    // Limits as From: max() of int64 is not representable in float/double, but 2^63 is. For
    // every integer type the first value past max() is a power of two, (max / 2 + 1) * 2,
    // exact as From.
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From hi = static_cast<From>(std::numeric_limits<To>::max() / 2 + 1) * From(2);
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
void convert(const From* in, To* out, std::size_t n,
             const ChunkRunner& runner = inline_runner()) noexcept {
  parallel_for(runner, static_cast<std::int64_t>(n), chunk_elements(sizeof(From) + sizeof(To)),
               [&](std::int64_t begin, std::int64_t end) noexcept {
                 const From* src = in + begin;
                 To* dst = out + begin;
                 const std::int64_t len = end - begin;
                 for (std::int64_t i = 0; i < len; ++i) dst[i] = convert_value<To>(src[i]);
               });
}

}  // namespace ferry::kernels
