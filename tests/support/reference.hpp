#pragma once
// Plain reference loops and data for kernel tests. Nothing here calls ferry's kernels: each
// reference is the textbook loop, so a test compares two independent computations.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

namespace ferry_test {

/// Row-major multi-index of flat position `flat` in `shape`.
inline std::vector<std::int64_t> unravel(std::int64_t flat, const ferry::Shape& shape) {
  std::vector<std::int64_t> idx(shape.rank());
  for (std::size_t d = shape.rank(); d-- > 0;) {
    idx[d] = flat % shape.dims()[d];
    flat /= shape.dims()[d];
  }
  return idx;
}

/// Flat position in `in` of the element that output index `out_idx` reads under NumPy
/// broadcasting (dimensions aligned at the right; size-1 dimensions repeat).
inline std::int64_t broadcast_source(const std::vector<std::int64_t>& out_idx,
                                     const ferry::Shape& in) {
  const std::size_t offset = out_idx.size() - in.rank();
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    const std::int64_t i = in.dims()[d] == 1 ? 0 : out_idx[offset + d];
    flat = flat * in.dims()[d] + i;
  }
  return flat;
}

/// `n` deterministic pseudo-random values of T: small integers for integer types (so sums and
/// products stay exact in the wide ones; -9..9 wraps to 247..255 in uint8, and the narrow types'
/// sums may wrap, which expect_values allows for), values in [-4, 4) for floating types.
template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed = 1) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  if constexpr (std::is_same_v<T, bool>) {
    std::bernoulli_distribution dist(0.5);
    for (std::size_t i = 0; i < n; ++i) v[i] = dist(gen);
  } else if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<int> dist(-9, 9);
    for (auto& x : v) x = static_cast<T>(dist(gen));
  } else {
    std::uniform_real_distribution<double> dist(-4.0, 4.0);
    for (auto& x : v) x = static_cast<T>(static_cast<float>(dist(gen)));
  }
  return v;
}

/// Relative tolerance for comparing a ferry result of T with a reference computed in double.
template <class T>
constexpr double tolerance() {
  if constexpr (std::is_same_v<T, ferry::bfloat16>) return 1.0 / 64;  // 7 mantissa bits, ~2 ulp
  else if constexpr (std::is_same_v<T, ferry::float16>) return 1.0 / 512;  // 10 bits, ~2 ulp
  else if constexpr (std::is_same_v<T, float>) return 1e-5;
  else if constexpr (std::is_same_v<T, double>) return 1e-12;
  else return 0;
}

/// Expects `actual` to equal `expected` exactly for integers and bools, and within
/// tolerance<T>() (relative, with an absolute floor of the same size) for floating types.
/// NaN matches NaN; infinities must match exactly. An expected integer outside a narrow
/// integer type (int8, uint8, int16) is taken modulo 2^bits, as ferry's integer arithmetic
/// wraps: the reference computes exactly in double, and wrapping once at the end gives what
/// wrapping at every step gives.
template <class T>
void expect_values(const std::vector<double>& expected, std::span<const T> actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = static_cast<double>(static_cast<std::conditional_t<
        ferry::HalfFloating<T>, float, T>>(actual[i]));
    double e = expected[i];
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) < 4) {
      e = static_cast<double>(static_cast<T>(static_cast<std::int64_t>(e)));
    }
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << "at " << i << ": expected NaN, got " << a;
    } else if (std::isinf(e) || tolerance<T>() == 0) {
      EXPECT_EQ(e, a) << "at " << i;
    } else {
      EXPECT_NEAR(e, a, tolerance<T>() * std::max(1.0, std::abs(e))) << "at " << i;
    }
  }
}

/// The element types every numeric kernel is swept over.
using NumericTypes =
    ::testing::Types<float, double, std::int32_t, std::int64_t, ferry::bfloat16, ferry::float16,
                     std::int8_t, std::uint8_t, std::int16_t>;
/// The floating element types.
using FloatingTypes = ::testing::Types<float, double, ferry::bfloat16, ferry::float16>;

}  // namespace ferry_test
