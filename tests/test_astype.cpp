// DeviceArray<T>::astype<U>() for every pair of element types, on every executor kind, against a
// reference that follows the rules documented in kernels/convert.hpp:
// - to bool: x != 0 (NaN is true);
// - floating to integer: truncation toward zero, saturating at the limits, NaN to 0;
// - integer to a narrower integer: two's-complement wrap-around;
// - to bfloat16 and float16: round to nearest even, in a single rounding from any source type;
// - from bool: 0 or 1;
// and, for the rest (integers and doubles to float or double), C++'s own conversion.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_astype {

namespace {

using ferry::bfloat16;
using ferry::float16;
using ferry::Shape;

using ElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, bfloat16, bool,
                                      float16, std::int8_t, std::uint8_t, std::int16_t>;

struct TypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::string(ferry::name_of(ferry::dtype_of<T>));
  }
};

template <class T>
std::string type_name() {
  return std::string(ferry::name_of(ferry::dtype_of<T>));
}

// ---- The reference --------------------------------------------------------------------------

float value_of(bfloat16 b) { return std::bit_cast<float>(std::uint32_t{b.bits} << 16); }

/// A float16's value from the binary16 definition (NaN for the NaN patterns).
float value_of(float16 h) {
  const int e = (h.bits >> 10) & 0x1f;
  const int m = h.bits & 0x3ff;
  float v = 0;
  if (e == 0x1f) v = m == 0 ? INFINITY : NAN;
  else if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else v = std::ldexp(static_cast<float>(1024 + m), e - 25);
  return (h.bits & 0x8000) != 0 ? -v : v;
}

/// As bf16_pattern below, for float16: spacing 2^ulp with ulp = 10 less than the binade's
/// exponent, never below -24; the pattern of q * 2^ulp is ((ulp + 24) << 10) + q.
std::uint16_t f16_pattern(bool negative, std::uint64_t m, int e) {
  const std::uint16_t sign = negative ? 0x8000 : 0;
  if (m == 0) return sign;
  const int top = static_cast<int>(std::bit_width(m)) - 1 + e;
  if (top > 15) return sign | 0x7c00;
  const int ulp = (top < -14 ? -14 : top) - 10;
  const int shift = ulp - e;
  std::uint64_t q = 0;
  if (shift <= 0) {
    q = m << -shift;
  } else if (shift < 64) {
    q = m >> shift;
    const std::uint64_t rem = m & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1) != 0)) ++q;
  }
  return static_cast<std::uint16_t>(sign | (((ulp + 24) << 10) + q));
}

/// The bfloat16 pattern nearest to (-1)^negative * m * 2^e, ties to even, worked out in
/// integers from the layout: in the binade of the value the spacing is 2^ulp, with ulp = 7 less
/// than the binade's exponent (never below -133, the subnormal spacing). q = value / 2^ulp is
/// rounded to nearest even, and the pattern of q * 2^ulp is ((ulp + 133) << 7) + q: each binade
/// adds 128 to the pattern, so a carry of q to 256 moves on to the next exponent, and past the
/// largest finite value to infinity.
std::uint16_t bf16_pattern(bool negative, std::uint64_t m, int e) {
  const std::uint16_t sign = negative ? 0x8000 : 0;
  if (m == 0) return sign;
  const int top = static_cast<int>(std::bit_width(m)) - 1 + e;
  if (top > 127) return sign | 0x7f80;
  const int ulp = (top < -126 ? -126 : top) - 7;
  const int shift = ulp - e;
  std::uint64_t q = 0;
  if (shift <= 0) {
    q = m << -shift;
  } else if (shift < 64) {
    q = m >> shift;
    const std::uint64_t rem = m & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1) != 0)) ++q;
  }
  return static_cast<std::uint16_t>(sign | (((ulp + 133) << 7) + q));
}

bfloat16 reference_bfloat16(double d) {  // every float, double and int32 is exact as a double
  const auto u = std::bit_cast<std::uint64_t>(d);
  const bool negative = (u >> 63) != 0;
  if (std::isnan(d)) return bfloat16::from_bits(negative ? 0xffc0 : 0x7fc0);
  if (std::isinf(d)) return bfloat16::from_bits(negative ? 0xff80 : 0x7f80);
  const auto field = static_cast<int>((u >> 52) & 0x7ff);
  const std::uint64_t fraction = u & ((std::uint64_t{1} << 52) - 1);
  if (field == 0) return bfloat16::from_bits(bf16_pattern(negative, fraction, -1074));  // subnormal
  const std::uint64_t significand = fraction | (std::uint64_t{1} << 52);
  return bfloat16::from_bits(bf16_pattern(negative, significand, field - 1075));
}

bfloat16 reference_bfloat16(std::int64_t v) {  // int64 is not exact as a double: use integers
  const bool negative = v < 0;
  const std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(v)
                                           : static_cast<std::uint64_t>(v);
  return bfloat16::from_bits(bf16_pattern(negative, magnitude, 0));
}

float16 reference_float16(double d) {
  const auto u = std::bit_cast<std::uint64_t>(d);
  const bool negative = (u >> 63) != 0;
  if (std::isnan(d)) return float16::from_bits(negative ? 0xfe00 : 0x7e00);
  if (std::isinf(d)) return float16::from_bits(negative ? 0xfc00 : 0x7c00);
  const auto field = static_cast<int>((u >> 52) & 0x7ff);
  const std::uint64_t fraction = u & ((std::uint64_t{1} << 52) - 1);
  if (field == 0) return float16::from_bits(f16_pattern(negative, fraction, -1074));
  const std::uint64_t significand = fraction | (std::uint64_t{1} << 52);
  return float16::from_bits(f16_pattern(negative, significand, field - 1075));
}

float16 reference_float16(std::int64_t v) {
  const bool negative = v < 0;
  const std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(v)
                                           : static_cast<std::uint64_t>(v);
  return float16::from_bits(f16_pattern(negative, magnitude, 0));
}

/// Two's-complement wrap of `v` into the integer type To: v modulo 2^bits, read as To.
template <class To>
To wrap(std::int64_t v) {
  if constexpr (sizeof(To) == 8) {
    return static_cast<To>(v);
  } else {
    constexpr int kBits = 8 * static_cast<int>(sizeof(To));
    const std::uint64_t low = static_cast<std::uint64_t>(v) & ((std::uint64_t{1} << kBits) - 1);
    const bool high_bit = std::is_signed_v<To> && low >= (std::uint64_t{1} << (kBits - 1));
    return static_cast<To>(high_bit ? static_cast<std::int64_t>(low) - (std::int64_t{1} << kBits)
                                    : static_cast<std::int64_t>(low));
  }
}

/// Truncation toward zero, saturating at To's limits, NaN to 0.
template <class To>
To truncate_saturate(double v) {
  if (std::isnan(v)) return 0;
  const double limit = std::ldexp(1.0, std::numeric_limits<To>::digits);  // 2^7 ... 2^63, 2^8
  const double t = std::trunc(v);
  if (t >= limit) return std::numeric_limits<To>::max();
  if (t < static_cast<double>(std::numeric_limits<To>::min())) {
    return std::numeric_limits<To>::min();
  }
  return static_cast<To>(t);  // an integer in range: exact
}

template <class To, class From>
To reference_convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, bfloat16> || std::is_same_v<From, float16>) {
    return reference_convert<To>(value_of(x));  // a 16-bit float converts as the float it is
  } else if constexpr (std::is_same_v<From, bool>) {
    return reference_convert<To>(std::int32_t{x ? 1 : 0});
  } else if constexpr (std::is_same_v<To, bool>) {
    return !(x == From{0});  // NaN compares unequal to everything: true
  } else if constexpr (std::is_same_v<To, bfloat16>) {
    if constexpr (std::is_same_v<From, std::int64_t>) return reference_bfloat16(x);
    else return reference_bfloat16(static_cast<double>(x));
  } else if constexpr (std::is_same_v<To, float16>) {
    if constexpr (std::is_same_v<From, std::int64_t>) return reference_float16(x);
    else return reference_float16(static_cast<double>(x));
  } else if constexpr (std::is_integral_v<To>) {
    if constexpr (std::is_integral_v<From>) return wrap<To>(x);
    else return truncate_saturate<To>(static_cast<double>(x));
  } else {
    return static_cast<To>(x);  // to float or double: round to nearest
  }
}

// ---- Exact comparison -------------------------------------------------------------------------

template <class T>
std::string describe(T v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    s << value_of(v) << " (bits 0x" << std::hex << v.bits << ")";
  } else if constexpr (std::is_floating_point_v<T>) {
    s << v << " (" << std::hexfloat << v << ")";
  } else {
    s << +v;
  }
  return s.str();
}

/// Conversions are exact functions, so results must match bit for bit (the sign of a zero
/// included), except that any NaN matches any NaN. expect_values in support/ compares floating
/// types with a tolerance, which would hide a wrong rounding.
template <class T>
bool same_value(T expected, T actual) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    return expected.bits == actual.bits ||
           (std::isnan(value_of(expected)) && std::isnan(value_of(actual)));
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(
               expected) ==
               std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(
                   actual) ||
           (std::isnan(expected) && std::isnan(actual));
  } else {
    return expected == actual;
  }
}

template <class From, class To>
void expect_converted(const std::vector<From>& input, std::span<const To> actual) {
  ASSERT_EQ(input.size(), actual.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    const From x = input[i];
    const To expected = reference_convert<To>(x);
    EXPECT_TRUE(same_value(expected, actual[i]))
        << "at " << i << ": " << describe(x) << " gave " << describe(actual[i]) << ", expected "
        << describe(expected);
  }
}

// ---- Inputs -----------------------------------------------------------------------------------

/// The values where the rules differ from a plain cast, or where a wrong rounding shows.
template <class T>
std::vector<T> edge_values() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  if constexpr (std::is_same_v<T, float>) {
    return {0.0f, -0.0f, 0.5f, -0.5f, 0.99999994f, 1.0f, -1.0f, 1.5f, -1.5f, 2.5f, -2.5f,
            1.0f + 0x1p-8f,                 // bfloat16 tie: to even, down
            1.0f + 0x3p-8f,                 // bfloat16 tie: to even, up
            1.0f + 0x1p-8f + 0x1p-23f,      // just past a tie
            1.0f + 0x1p-11f, 1.0f + 0x3p-11f,  // float16 ties: to even, down and up
            65504.0f, 65519.996f, 65520.0f, -65520.0f,  // float16's max, below and at overflow
            0x1p-24f, 0x1p-25f, 0x3p-25f, 0x1.000002p-25f, 0x7ffp-25f,  // float16 subnormals
            127.5f, 128.0f, -128.5f, -129.0f, 255.5f, 256.0f, -0.9f,  // int8 and uint8 limits
            32767.5f, 32768.0f, -32768.5f, -32769.0f,                 // int16's
            16777216.0f, 2147483520.0f,     // the largest float below 2^31
            0x1p31f, -0x1p31f,              // 2^31 saturates, -2^31 is INT32_MIN exactly
            -2147483904.0f, 3e9f, -3e9f,    // beyond int32
            0x1p63f, -0x1p63f, 9223371487098961920.0f,  // 2^63 saturates; the float below it
            1e30f, -1e30f, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
            std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
            -std::numeric_limits<float>::denorm_min(), 0x1p-133f, 0x1.8p-133f,
            static_cast<float>(inf), static_cast<float>(-inf), static_cast<float>(nan),
            -static_cast<float>(nan)};
  } else if constexpr (std::is_same_v<T, double>) {
    return {0.0, -0.0, 0.5, -0.5, 0.99999, -0.99999, 1.5, -1.5,
            2147483647.0, 2147483647.5, 2147483648.0,    // int32's max, truncated, and past it
            -2147483648.0, -2147483648.5, -2147483649.0, // int32's min, truncated, and past it
            4294967296.0, -4294967301.0,                 // beyond int32: saturate, not wrap
            0x1p53, 9223372036854774784.0,               // the largest double below 2^63
            0x1p63, -0x1p63, -9223372036854777856.0,     // 2^63 saturates; below -2^63 too
            1e300, -1e300, 1e-300, -1e-300,              // out of float's range both ways
            std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(),
            1.0 + 0x1p-8 + 0x1p-30,                      // float would round it twice
            1.0 + 0x3p-8 - 0x1p-30,
            0x1p128 - 0x1p119 - 0x1p76,                  // just below bfloat16's overflow
            0x1p-134 + 0x1p-170,                         // just above a subnormal tie
            1.0 + 0x1p-11 + 0x1p-40,                     // float16: rounds once, up
            65520.0 - 0x1p-20, 0x1p-25 + 0x1p-60,        // float16: below overflow, past a tie
            -128.99, 255.99, 32767.99, -32768.99,        // truncate into the narrow types
            0.1, -2.7, inf, -inf, nan, -nan};
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return {0, 1, -1, 7, -7, std::numeric_limits<std::int32_t>::min(),
            std::numeric_limits<std::int32_t>::max(),
            16777217, -16777217,  // float rounds these
            255, 257, 259, -129,  // bfloat16 rounds 257 and 259 to even, 129 to 128
            65535, 1 << 30,
            128, -128, 256, 32767, 32768, -32769, 65536 + 7,  // wrap into int8, uint8, int16
            2049, 2051, 65504, 65519, 65520, -65520};         // float16 ties and overflow
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    constexpr std::int64_t p62 = std::int64_t{1} << 62;
    constexpr std::int64_t p54 = std::int64_t{1} << 54;
    std::vector<std::int64_t> v{0, -1, 1, std::numeric_limits<std::int64_t>::min(),
            std::numeric_limits<std::int64_t>::max(),
            std::int64_t{1} << 31,                      // wraps to INT32_MIN
            (std::int64_t{1} << 31) - 1, -(std::int64_t{1} << 31) - 1,
            (std::int64_t{1} << 32) + 5, -(std::int64_t{1} << 32) - 5,
            (std::int64_t{1} << 53) + 1, (std::int64_t{1} << 24) + 1,
            p62 + p54,                                  // an exact bfloat16 tie: to even
            p62 + p54 + 1, -(p62 + p54 + 1),            // past it: double would round it twice
            p62 + 3 * p54 - 1,                          // just below a tie
            (std::int64_t{1} << 40) + (std::int64_t{1} << 32) + 1};
    // Around both kinds of bfloat16 tie (even neighbour below, odd neighbour below) in every
    // binade where an int64 has more bits than a double keeps, and in a few where it does not.
    for (int k = 9; k <= 62; ++k) {
      const std::int64_t p = std::int64_t{1} << k;
      for (std::int64_t tie : {p + (p >> 8), p + 3 * (p >> 8)}) {
        for (std::int64_t d : {-1, 0, 1}) {
          v.push_back(tie + d);
          v.push_back(-(tie + d));
        }
      }
    }
    return v;
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    std::vector<bfloat16> v;
    for (std::uint16_t bits : {0x0000, 0x8000, 0x3f80, 0xbfc0, 0x3f00, 0xbf00, 0x3f7f, 0xbf7f,
                               0x4eff, 0x4f00, 0xcf00, 0xcf01,  // around 2^31 and -2^31
                               0x5eff, 0x5f00, 0xdf00, 0xdf01,  // around 2^63 and -2^63
                               0x7f7f, 0xff7f, 0x0001, 0x8001, 0x0080, 0x4380, 0x4b80,
                               0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fa0}) {
      v.push_back(bfloat16::from_bits(bits));
    }
    return v;
  } else if constexpr (std::is_same_v<T, float16>) {
    std::vector<float16> v;
    for (std::uint16_t bits : {0x0000, 0x8000, 0x3c00, 0xbe00, 0x3800, 0xb800, 0x3bff, 0xbbff,
                               0x57ff, 0x5800, 0xd800, 0xd801,  // around 127 and 128, -128
                               0x5bf8, 0x5c00, 0x77ff, 0x7800,  // 255, 256, 32752, 32768
                               0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x0400, 0x6801,
                               0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d00}) {
      v.push_back(float16::from_bits(bits));
    }
    return v;
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using L = std::numeric_limits<T>;
    return {T(0), T(1), T(7), L::min(), L::max(), static_cast<T>(L::max() - 1),
            static_cast<T>(L::min() + 1), static_cast<T>(L::max() / 2 + 1)};
  } else {
    return {false, true, true, false};
  }
}

/// Random values beyond support's small ones: floating values over the whole exponent range
/// (subnormals to overflow of the narrower types), integers over the whole range.
template <class T>
std::vector<T> wide_values(std::size_t n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::vector<T> v;
  if constexpr (std::is_same_v<T, bool>) {
    return v;
  } else if constexpr (std::is_integral_v<T>) {
    // The distribution of a wider type: uniform_int_distribution refuses the char types.
    using W = std::conditional_t<(sizeof(T) < 4), std::int32_t, T>;
    std::uniform_int_distribution<W> dist(std::numeric_limits<T>::min(),
                                          std::numeric_limits<T>::max());
    for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<T>(dist(gen)));
  } else {
    // float16's range is narrow: its own exponents, from below the subnormals past overflow.
    const int min_exp = std::is_same_v<T, float16> ? -26 : -140;
    const int max_exp = std::is_same_v<T, double> ? 140 : std::is_same_v<T, float16> ? 17 : 127;
    std::uniform_int_distribution<int> exponent(min_exp, max_exp);
    std::uniform_real_distribution<double> mantissa(1.0, 2.0);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = std::ldexp(mantissa(gen), exponent(gen)) * ((gen() & 1) != 0 ? -1 : 1);
      if constexpr (std::is_same_v<T, double>) v.push_back(x);
      else v.push_back(static_cast<T>(static_cast<float>(x)));
    }
  }
  return v;
}

template <class T>
std::vector<T> test_input() {
  std::vector<T> input = edge_values<T>();
  const auto small = ferry_test::random_values<T>(64, 5);
  const auto wide = wide_values<T>(256, 9);
  input.insert(input.end(), small.begin(), small.end());
  input.insert(input.end(), wide.begin(), wide.end());
  return input;
}

// ---- Tests ------------------------------------------------------------------------------------

template <class From>
class Astype : public ::testing::Test {};
TYPED_TEST_SUITE(Astype, ElementTypes, TypeNames);

template <class From, class To>
void check_conversion(const ferry::Device& dev, const std::vector<From>& input) {
  SCOPED_TRACE(type_name<From>() + " -> " + type_name<To>());
  const Shape shape{input.size()};
  const auto x = ferry::to_device(dev, input, shape);
  const auto y = x.template astype<To>();
  EXPECT_EQ(y.shape(), shape);
  EXPECT_EQ(y.dtype(), ferry::dtype_of<To>);
  const ferry::HostArray<To> h = y.to_host();
  expect_converted<From, To>(input, h.data());
}

TYPED_TEST(Astype, ToEveryElementTypeFollowsTheRules) {
  using From = TypeParam;
  const std::vector<From> input = test_input<From>();
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    check_conversion<From, float>(dev, input);
    check_conversion<From, double>(dev, input);
    check_conversion<From, std::int32_t>(dev, input);
    check_conversion<From, std::int64_t>(dev, input);
    check_conversion<From, bfloat16>(dev, input);
    check_conversion<From, bool>(dev, input);
    check_conversion<From, float16>(dev, input);
    check_conversion<From, std::int8_t>(dev, input);
    check_conversion<From, std::uint8_t>(dev, input);
    check_conversion<From, std::int16_t>(dev, input);
  });
}

TYPED_TEST(Astype, ToTheSameTypeReturnsTheSameArray) {
  using T = TypeParam;
  const std::vector<T> input = edge_values<T>();
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    const auto x = ferry::to_device(dev, input, Shape{input.size()});
    const auto y = x.template astype<T>();
    // The same handle: the same step behind both, so no copy and no new graph node.
    EXPECT_EQ(ferry::detail::ArrayAccess::step(y), ferry::detail::ArrayAccess::step(x));
    const auto h = y.to_host();
    expect_converted<T, T>(input, h.data());
  });
}

TYPED_TEST(Astype, ToTheSameTypeAddsNoStep) {
  using T = TypeParam;
  using Other = std::conditional_t<std::is_same_v<T, bool>, std::int32_t, bool>;
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  const auto x = ferry::to_device(dev, edge_values<T>(), Shape{edge_values<T>().size()});
  ASSERT_EQ(manual.ready_count(), 0u);  // an import is complete on arrival
  (void)x.template astype<T>();
  EXPECT_EQ(manual.ready_count(), 0u);
  (void)x.template astype<Other>();  // the control: a real conversion is a new step
  EXPECT_EQ(manual.ready_count(), 1u);
}

// Shapes, chains and laziness need one element type pair each, on every executor.
class AstypeOnDevice : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(AstypeOnDevice);

TEST_P(AstypeOnDevice, KeepsTheShapeIncludingScalarAndEmpty) {
  const std::vector<double> values{-2.5, -0.5, 0.0, 0.5, 1.5, 1e10};
  const auto m = ferry::to_device(dev, values, Shape{2, 3}).astype<std::int32_t>();
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  const auto hm = m.to_host();
  expect_converted<double, std::int32_t>(values, hm.data());
  EXPECT_EQ(hm(1, 2), std::numeric_limits<std::int32_t>::max());

  const auto s = ferry::to_device(dev, {-3.75f}, Shape{}).astype<std::int64_t>();
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.to_host()(), -3);

  const auto e = ferry::to_device(dev, std::vector<float>{}, Shape{0, 3}).astype<bfloat16>();
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_TRUE(e.to_host().data().empty());
}

TEST_P(AstypeOnDevice, ChainsConvertStepByStep) {
  // float -> double -> int64 -> int32 -> bfloat16 -> bool: each step applies its own rule to the
  // previous step's result, not to the original value.
  const std::vector<float> input{-0.0f, 0.75f, -1.5f, 3e9f, 16777216.0f, 257.9f, -1e20f};
  const auto x = ferry::to_device(dev, input, Shape{input.size()});
  const auto d = x.astype<double>();
  const auto i64 = d.astype<std::int64_t>();
  const auto i32 = i64.astype<std::int32_t>();
  const auto b16 = i32.astype<bfloat16>();
  const auto mask = b16.astype<bool>();
  const auto [hd, hi64, hi32, hb16, hmask] = ferry::to_host(d, i64, i32, b16, mask);
  std::vector<double> rd;
  std::vector<std::int64_t> r64;
  std::vector<std::int32_t> r32;
  std::vector<bfloat16> rb16;
  for (float v : input) {
    rd.push_back(reference_convert<double>(v));
    r64.push_back(reference_convert<std::int64_t>(rd.back()));
    r32.push_back(reference_convert<std::int32_t>(r64.back()));
    rb16.push_back(reference_convert<bfloat16>(r32.back()));
  }
  expect_converted<float, double>(input, hd.data());
  expect_converted<double, std::int64_t>(rd, hi64.data());
  expect_converted<std::int64_t, std::int32_t>(r64, hi32.data());
  expect_converted<std::int32_t, bfloat16>(r32, hb16.data());
  expect_converted<bfloat16, bool>(rb16, hmask.data());
  // 3e9 saturates nowhere on the way (it fits int64), then wraps into int32.
  EXPECT_EQ(hi32(3), static_cast<std::int32_t>(3000000000LL - 4294967296LL));
}

TEST(AstypeManual, ConvertsOnlyWhenAnExportDrivesIt) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  const auto x = ferry::to_device(dev, {1.5f, -2.5f}, Shape{2});
  const auto y = x.astype<std::int32_t>().astype<double>();
  EXPECT_FALSE(y.ready());
  EXPECT_EQ(manual.ready_count(), 1u);  // the first conversion; the second waits on it
  const auto h = y.to_host();
  EXPECT_EQ(h(0), 1.0);
  EXPECT_EQ(h(1), -2.0);
}

TEST(DTypeNames, EachTypeIsNamedAndReadBackByItsName) {
  for (std::size_t i = 0; i < ferry::kDTypeCount; ++i) {
    const auto t = static_cast<ferry::DType>(i);
    EXPECT_EQ(ferry::dtype_named(ferry::name_of(t)), t) << ferry::name_of(t);
  }
  EXPECT_EQ(ferry::dtype_named("bool"), ferry::DType::boolean);
  for (const char* name : {"", "?", "f32", "Float32", "float32 ", "boolean", "float8"})
    EXPECT_FALSE(ferry::dtype_named(name).has_value()) << name;
}

TEST(AstypeErrors, EmptyHandleIsRejected) {
  const ferry::DeviceArray<float> empty;
  EXPECT_THROW((void)empty.astype<std::int32_t>(), ferry::InvalidArgument);
  try {
    (void)empty.astype<bool>();
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(
        e.what(),
        "[astype] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  }
  // Even the conversion to its own type, which has nothing to do, checks the handle.
  EXPECT_THROW((void)empty.astype<float>(), ferry::InvalidArgument);
  ferry::Device dev;
  auto x = ferry::to_device(dev, {1.0}, Shape{1});
  const auto moved = std::move(x);
  EXPECT_THROW((void)x.astype<float>(), ferry::InvalidArgument);  // NOLINT: use after move
  EXPECT_EQ(moved.astype<float>().to_host()(0), 1.0f);
}

}  // namespace

}  // namespace test_astype
