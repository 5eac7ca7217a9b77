// float16 (IEEE binary16): widening to float (exact, every one of the 65,536 patterns), rounding
// from float, double and int64 (to nearest, ties to even, in one rounding), subnormals, overflow
// to infinity, NaN, numeric_limits; the conversions of the narrow integer types; and the matmul
// kernel's float accumulation. Every expectation comes from references written here from the bit
// layout (1 sign bit, 5 exponent bits biased by 15, 10 mantissa bits), not from ferry's code.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ferry/core/bfloat16.hpp>
#include <ferry/core/float16.hpp>
#include <ferry/kernels/convert.hpp>
#include <ferry/kernels/matmul.hpp>

namespace test_float16 {

namespace {

using ferry::float16;

constexpr std::uint16_t kSign = 0x8000;
constexpr std::uint16_t kInf = 0x7c00;
constexpr std::uint16_t kQuietBit = 0x0200;
constexpr std::uint16_t kMaxFinite = 0x7bff;  // 65504

float float_of(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
bool is_nan_pattern(std::uint16_t h) { return (h & 0x7fff) > kInf; }

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

/// The value of a non-NaN half pattern, from the definition: (-1)^s * m * 2^-24 for exponent 0,
/// (-1)^s * (1024 + m) * 2^(e - 25) otherwise, infinity for exponent 31.
double value_of(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v = 0;
  if (e == 0x1f) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m, -24);
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return (h & kSign) != 0 ? -v : v;
}

/// Reference rounding of a finite double, exact in integers: the value is m * 2^e; the half
/// spacing (ulp) of its binade is 2^(max(top, -14) - 10); split m * 2^e / ulp into a quotient q
/// and a remainder, round q to nearest even. The encoding of q * ulp is ((ulp exponent + 24) <<
/// 10) + q: in the lowest binade (ulp 2^-24) the pattern is q itself (subnormals and the first
/// normals share the spacing), and each binade up adds 1024, so a carry of q to 2048 moves into
/// the next exponent and past the largest finite value into infinity.
std::uint16_t reference_bits(double d) {
  const auto u = std::bit_cast<std::uint64_t>(d);
  const auto sign = static_cast<std::uint16_t>((u >> 63) != 0 ? kSign : 0);
  const auto field = static_cast<int>((u >> 52) & 0x7ff);
  std::uint64_t m = u & ((std::uint64_t{1} << 52) - 1);
  int e = -1074;
  if (field != 0) {
    m |= std::uint64_t{1} << 52;
    e = field - 1075;
  }
  if (m == 0) return sign;
  // The value lies in [2^top, 2^(top + 1)).
  const int top = static_cast<int>(std::bit_width(m)) - 1 + e;
  if (top > 15) return sign | kInf;
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
  }  // else: m < 2^53 is below half an ulp, so q stays 0
  return static_cast<std::uint16_t>(sign | (((ulp + 24) << 10) + q));
}

/// A second reference, by search: the finite half nearest to `x` (ties to the even pattern),
/// or infinity when x is at least the overflow threshold 65520 (IEEE: overflow is decided as
/// if the exponent range went on, and 65520 is the tie between 65504 and 2^16).
std::uint16_t nearest_by_search(double x) {
  const auto sign = static_cast<std::uint16_t>(std::signbit(x) ? kSign : 0);
  const double a = std::abs(x);
  if (a >= 65520.0) return sign | kInf;
  std::uint16_t lo = 0;
  std::uint16_t hi = kMaxFinite;
  while (hi - lo > 1) {  // patterns of non-negative halves are ordered like their values
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    (value_of(mid) <= a ? lo : hi) = mid;
  }
  const double below = a - value_of(lo);
  const double above = value_of(hi) - a;
  std::uint16_t pick = lo;
  if (above < below || (above == below && (hi & 1) == 0)) pick = hi;
  if (value_of(hi) <= a) pick = hi;
  return sign | pick;
}

void expect_rounds(float x, std::uint16_t expected) {
  EXPECT_EQ(float16(x).bits, expected) << "float " << hex(bits_of(x)) << " (" << x << ")";
  EXPECT_EQ(reference_bits(x), expected) << "the reference disagrees on " << x;
}

// ---- Compile time: the conversions are constexpr. -----------------------------------------------

static_assert(float16(1.0f).bits == 0x3c00);
static_assert(float16(-2.0f).bits == 0xc000);
static_assert(float16(65504.0f).bits == 0x7bff);
static_assert(float16(0x1p-24f).bits == 0x0001);
static_assert(static_cast<float>(float16::from_bits(0x3e00)) == 1.5f);
static_assert(static_cast<float>(float16::from_bits(0x0001)) == 0x1p-24f);

// ---- half -> float, exhaustively ----------------------------------------------------------------

TEST(Float16ToFloat, EveryPatternIsItsValue) {
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {
    const auto h = static_cast<std::uint16_t>(p);
    const float f = float16::from_bits(h);
    if (is_nan_pattern(h)) {
      // NaN: the sign, and the payload in the float mantissa's top bits (quiet stays quiet).
      ASSERT_TRUE(std::isnan(f)) << hex(p);
      ASSERT_EQ(bits_of(f) >> 31, p >> 15) << hex(p);
      ASSERT_EQ((bits_of(f) >> 13) & 0x3ff, p & 0x3ff) << hex(p);
    } else {
      ASSERT_EQ(static_cast<double>(f), value_of(h)) << hex(p);
      ASSERT_EQ(std::signbit(f), (p & kSign) != 0) << hex(p);  // -0 stays -0
    }
  }
}

TEST(Float16ToFloat, KnownValues) {
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x3c00)), 1.0f);
  EXPECT_EQ(static_cast<float>(float16::from_bits(0xc500)), -5.0f);
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x0001)), 0x1p-24f);    // smallest subnormal
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x03ff)), 0x3ffp-24f);  // largest subnormal
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x0400)), 0x1p-14f);    // smallest normal
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x7bff)), 65504.0f);
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x3555)), 0x1.554p-2f);  // 1/3 rounded
  EXPECT_TRUE(std::isinf(static_cast<float>(float16::from_bits(0xfc00))));
  EXPECT_TRUE(std::isnan(static_cast<float>(float16::from_bits(0x7e00))));
}

TEST(Float16RoundTrip, EveryPatternSurvivesFloatAndBack) {
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {
    const auto pattern = static_cast<std::uint16_t>(p);
    const float16 back(static_cast<float>(float16::from_bits(pattern)));
    if (is_nan_pattern(pattern)) {
      // NaN stays NaN with its sign and payload; a signalling one comes back quiet.
      ASSERT_EQ(back.bits, pattern | kQuietBit) << hex(p);
    } else {
      ASSERT_EQ(back.bits, pattern) << hex(p);
    }
  }
}

TEST(Float16RoundTrip, ImplicitConversionsBothWays) {
  const float16 x = 2.5f;
  const float y = x;
  EXPECT_EQ(y, 2.5f);
  const float16 z = 0.1f;  // not representable: 0x2e66 is 0.0999755859375
  EXPECT_EQ(z.bits, 0x2e66);
  EXPECT_EQ(float16().bits, 0);
}

// ---- float -> half ------------------------------------------------------------------------------

TEST(Float16FromFloat, RepresentableValuesAreExact) {
  expect_rounds(1.0f, 0x3c00);
  expect_rounds(-1.5f, 0xbe00);
  expect_rounds(2048.0f, 0x6800);
  expect_rounds(65504.0f, kMaxFinite);
  expect_rounds(-65504.0f, kSign | kMaxFinite);
  expect_rounds(0x1p-14f, 0x0400);
  expect_rounds(0x1p-24f, 0x0001);
  expect_rounds(-0x3ffp-24f, kSign | 0x03ff);
}

TEST(Float16FromFloat, SignedZerosKeepTheirSign) {
  expect_rounds(0.0f, 0x0000);
  expect_rounds(-0.0f, 0x8000);
}

TEST(Float16FromFloat, EveryTieRoundsToTheEvenNeighbourAndOneUlpOffDecides) {
  // 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10 (odd): down; 1 + 3 * 2^-11: up.
  expect_rounds(1.0f + 0x1p-11f, 0x3c00);
  expect_rounds(1.0f + 0x3p-11f, 0x3c02);
  expect_rounds(2049.0f, 0x6800);  // between 2048 (even) and 2050
  expect_rounds(2051.0f, 0x6802);  // between 2050 (odd) and 2052
  // Every pair of neighbouring finite halves, both signs: the midpoint (exact as a float: 12
  // significant bits) goes to the even pattern, a float ulp below it to the lower, above it to
  // the upper one.
  for (std::uint32_t p = 0; p < kMaxFinite; ++p) {
    const double lo = value_of(static_cast<std::uint16_t>(p));
    const double hi = value_of(static_cast<std::uint16_t>(p + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (std::uint32_t sign : {0U, 0x8000U}) {
      const float s = sign != 0 ? -1.0f : 1.0f;
      const auto even = static_cast<std::uint16_t>(((p & 1) == 0 ? p : p + 1) | sign);
      ASSERT_EQ(float16(s * mid).bits, even) << "tie after " << hex(p | sign);
      ASSERT_EQ(float16(s * std::nextafter(mid, 0.0f)).bits, p | sign) << hex(p | sign);
      ASSERT_EQ(float16(s * std::nextafter(mid, 1e9f)).bits, (p + 1) | sign) << hex(p | sign);
    }
  }
}

TEST(Float16FromFloat, SubnormalsRoundOnTheirOwnGrid) {
  expect_rounds(0x1p-25f, 0x0000);                        // the tie between 0 and 2^-24: 0 is even
  expect_rounds(std::nextafter(0x1p-25f, 1.0f), 0x0001);  // just past it
  expect_rounds(std::nextafter(0x1p-25f, 0.0f), 0x0000);
  expect_rounds(0x3p-25f, 0x0002);  // tie between odd 1 and even 2
  expect_rounds(0x5p-25f, 0x0002);  // tie between even 2 and odd 3
  expect_rounds(-0x3p-25f, kSign | 0x0002);
  expect_rounds(0x1p-30f, 0x0000);  // far below: a zero of its sign
  expect_rounds(-0x1p-30f, kSign);
  expect_rounds(float_of(0x00000001), 0x0000);  // the smallest float subnormal
  expect_rounds(std::numeric_limits<float>::min(), 0x0000);
  // The tie between the largest subnormal (0x3ff, odd) and the smallest normal carries into
  // the exponent; just below it stays subnormal.
  expect_rounds(0x7ffp-25f, 0x0400);
  expect_rounds(std::nextafter(0x7ffp-25f, 0.0f), 0x03ff);
  expect_rounds(std::nextafter(0x1p-14f, 0.0f), 0x0400);
}

TEST(Float16FromFloat, OverflowRoundsToInfinityFromHalfwayPastTheLargestFinite) {
  expect_rounds(65519.0f, kMaxFinite);
  expect_rounds(std::nextafter(65520.0f, 0.0f), kMaxFinite);
  expect_rounds(65520.0f, kInf);  // the tie with 2^16: 65504's mantissa is odd
  expect_rounds(-65520.0f, kSign | kInf);
  expect_rounds(65536.0f, kInf);
  expect_rounds(1e10f, kInf);
  expect_rounds(std::numeric_limits<float>::max(), kInf);
  expect_rounds(std::numeric_limits<float>::lowest(), kSign | kInf);
  expect_rounds(std::numeric_limits<float>::infinity(), kInf);
  expect_rounds(-std::numeric_limits<float>::infinity(), kSign | kInf);
}

TEST(Float16FromFloat, NanStaysAQuietNanWithItsSign) {
  // Quiet and signalling NaNs, including payloads only in the bits a half drops (truncating
  // those would give infinity).
  for (std::uint32_t nan : {0x7fc00000U, 0x7f800001U, 0x7fa00000U, 0x7fbfffffU, 0x7fffffffU,
                            0xffc00000U, 0xff800001U, 0xffffffffU, 0x7f801fffU}) {
    const std::uint16_t h = float16(float_of(nan)).bits;
    EXPECT_TRUE(is_nan_pattern(h)) << hex(nan) << " gave " << hex(h);
    EXPECT_NE(h & kQuietBit, 0) << hex(nan) << " gave a signalling NaN " << hex(h);
    EXPECT_EQ(h & kSign, (nan >> 16) & kSign) << hex(nan) << " lost its sign: " << hex(h);
  }
}

TEST(Float16FromFloat, MatchesBothReferencesAcrossTheRange) {
  // Floats around every half value (exact, one and two float ulps either side) and random
  // floats whose exponents run from below the subnormals to past the overflow.
  for (std::uint32_t p = 0; p <= kMaxFinite; ++p) {
    const auto x = static_cast<float>(value_of(static_cast<std::uint16_t>(p)));
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e9f),
                    std::nextafter(std::nextafter(x, 1e9f), 1e9f)}) {
      ASSERT_EQ(float16(y).bits, reference_bits(y)) << hex(bits_of(y));
      ASSERT_EQ(float16(-y).bits, reference_bits(-y)) << hex(bits_of(-y));
    }
  }
  std::mt19937 gen(5);
  std::uniform_int_distribution<std::uint32_t> mantissa(0, 0x7fffff);
  std::uniform_int_distribution<std::uint32_t> exponent(127 - 30, 127 + 17);
  for (int i = 0; i < 300000; ++i) {
    const std::uint32_t u = ((gen() & 1U) << 31) | (exponent(gen) << 23) | mantissa(gen);
    const float x = float_of(u);
    ASSERT_EQ(float16(x).bits, reference_bits(x)) << hex(u);
    if (i % 16 == 0) {
      ASSERT_EQ(reference_bits(x), nearest_by_search(x)) << "references differ at " << hex(u);
    }
  }
}

// ---- double and int64 -> half, in one rounding --------------------------------------------------

void expect_from_double(double d, std::uint16_t expected) {
  EXPECT_EQ(ferry::kernels::float16_from_double(d).bits, expected) << std::hexfloat << d;
  EXPECT_EQ(reference_bits(d), expected) << "the reference disagrees on " << std::hexfloat << d;
}

TEST(Float16FromDouble, RoundsOnceWhereGoingThroughFloatWouldRoundTwice) {
  // Just above the tie between 1 and 1 + 2^-10: up. As a float it would first become the tie
  // itself (2^-40 is below half a float ulp) and then round down to even.
  const double above_tie = 1.0 + 0x1p-11 + 0x1p-40;
  ASSERT_EQ(float16(static_cast<float>(above_tie)).bits, 0x3c00);  // the double rounding
  expect_from_double(above_tie, 0x3c01);
  expect_from_double(-above_tie, 0xbc01);
  // Just below the overflow threshold: finite, though as a float it would be 65520 itself.
  const double below_overflow = 65520.0 - 0x1p-20;
  ASSERT_EQ(float16(static_cast<float>(below_overflow)).bits, kInf);
  expect_from_double(below_overflow, kMaxFinite);
  // In the subnormals: just above the tie between 0 and 2^-24.
  const double tiny_above_tie = 0x1p-25 + 0x1p-60;
  ASSERT_EQ(float16(static_cast<float>(tiny_above_tie)).bits, 0x0000);
  expect_from_double(tiny_above_tie, 0x0001);
}

TEST(Float16FromDouble, SpecialValuesAndRandomDoubles) {
  expect_from_double(65520.0, kInf);
  expect_from_double(1e300, kInf);
  expect_from_double(-1e300, kSign | kInf);
  expect_from_double(1e-300, 0x0000);
  expect_from_double(-1e-300, kSign);
  expect_from_double(-0.0, kSign);
  EXPECT_EQ(ferry::kernels::float16_from_double(std::numeric_limits<double>::infinity()).bits,
            kInf);
  const std::uint16_t nan =
      ferry::kernels::float16_from_double(-std::numeric_limits<double>::quiet_NaN()).bits;
  EXPECT_TRUE(is_nan_pattern(nan));
  EXPECT_EQ(nan & kSign, kSign);
  std::mt19937_64 gen(13);
  std::uniform_int_distribution<std::uint64_t> mantissa(0, (std::uint64_t{1} << 52) - 1);
  std::uniform_int_distribution<std::uint64_t> exponent(1023 - 30, 1023 + 17);
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t u = ((gen() & 1) << 63) | (exponent(gen) << 52) | mantissa(gen);
    const double d = std::bit_cast<double>(u);
    ASSERT_EQ(ferry::kernels::float16_from_double(d).bits, reference_bits(d)) << std::hexfloat << d;
  }
}

TEST(Float16FromInt64, RoundsToNearestEvenAndOverflowsToInfinity) {
  using ferry::kernels::float16_from_int64;
  EXPECT_EQ(float16_from_int64(2049).bits, 0x6800);  // tie: to 2048
  EXPECT_EQ(float16_from_int64(2051).bits, 0x6802);  // tie: to 2052
  EXPECT_EQ(float16_from_int64(-2051).bits, 0xe802);
  EXPECT_EQ(float16_from_int64(65504).bits, kMaxFinite);
  EXPECT_EQ(float16_from_int64(65519).bits, kMaxFinite);
  EXPECT_EQ(float16_from_int64(65520).bits, kInf);
  EXPECT_EQ(float16_from_int64(std::numeric_limits<std::int64_t>::min()).bits, kSign | kInf);
  EXPECT_EQ(float16_from_int64(std::numeric_limits<std::int64_t>::max()).bits, kInf);
  for (std::int64_t i = -70000; i <= 70000; ++i) {
    ASSERT_EQ(float16_from_int64(i).bits, reference_bits(static_cast<double>(i))) << i;
  }
}

// ---- numeric_limits -----------------------------------------------------------------------------

TEST(Float16Limits, ValuesFollowTheFormat) {
  using L = std::numeric_limits<float16>;
  static_assert(L::is_specialized && L::is_signed && !L::is_integer && !L::is_exact);
  static_assert(L::has_infinity && L::has_quiet_NaN && L::has_signaling_NaN && L::radix == 2);
  static_assert(L::has_denorm == std::denorm_present && L::is_iec559 && L::is_bounded);
  static_assert(L::digits == 11);  // 10 stored mantissa bits and the implicit one
  EXPECT_EQ(static_cast<float>(L::min()), 0x1p-14f);
  EXPECT_EQ(static_cast<float>(L::max()), 65504.0f);
  EXPECT_EQ(static_cast<float>(L::lowest()), -65504.0f);
  EXPECT_EQ(static_cast<float>(L::epsilon()),
            static_cast<float>(float16::from_bits(0x3c01)) - 1.0f);
  EXPECT_EQ(static_cast<float>(L::round_error()), 0.5f);
  EXPECT_EQ(static_cast<float>(L::denorm_min()), 0x1p-24f);
  EXPECT_EQ(static_cast<float>(L::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(L::max().bits + 1, L::infinity().bits);
  EXPECT_TRUE(std::isnan(static_cast<float>(L::quiet_NaN())));
  EXPECT_NE(L::quiet_NaN().bits & kQuietBit, 0);
  EXPECT_TRUE(std::isnan(static_cast<float>(L::signaling_NaN())));
  EXPECT_EQ(L::signaling_NaN().bits & kQuietBit, 0);
  EXPECT_EQ(L::digits10, static_cast<int>(std::floor((L::digits - 1) * std::log10(2.0))));
  EXPECT_EQ(L::max_digits10, static_cast<int>(std::ceil(1 + L::digits * std::log10(2.0))));
  EXPECT_EQ(std::ldexp(1.0f, L::min_exponent - 1), static_cast<float>(L::min()));
  EXPECT_EQ(float16(std::ldexp(1.0f, L::max_exponent - 1)).bits, 0x7800);
  EXPECT_EQ(float16(std::ldexp(1.0f, L::max_exponent)).bits, kInf);
  EXPECT_GE(std::pow(10.0, L::min_exponent10), static_cast<double>(L::min()));
  EXPECT_LT(std::pow(10.0, L::min_exponent10 - 1), static_cast<double>(L::min()));
  EXPECT_LE(std::pow(10.0, L::max_exponent10), static_cast<double>(L::max()));
  EXPECT_GT(std::pow(10.0, L::max_exponent10 + 1), static_cast<double>(L::max()));
}

// ---- convert_value: float16 and the narrow integers ---------------------------------------------

TEST(NarrowConversions, FloatingToIntegerTruncatesAndSaturates) {
  using ferry::kernels::convert_value;
  EXPECT_EQ(convert_value<std::int8_t>(float16(300.0f)), 127);
  EXPECT_EQ(convert_value<std::int8_t>(float16(-300.0f)), -128);
  EXPECT_EQ(convert_value<std::int8_t>(float16(-127.9f)), -127);
  EXPECT_EQ(convert_value<std::int8_t>(std::numeric_limits<float16>::quiet_NaN()), 0);
  EXPECT_EQ(convert_value<std::uint8_t>(-1.5f), 0);
  EXPECT_EQ(convert_value<std::uint8_t>(255.9), 255);
  EXPECT_EQ(convert_value<std::uint8_t>(256.0), 255);
  EXPECT_EQ(convert_value<std::uint8_t>(-std::numeric_limits<double>::infinity()), 0);
  EXPECT_EQ(convert_value<std::int16_t>(float16(65504.0f)), 32767);
  EXPECT_EQ(convert_value<std::int16_t>(-32768.5), -32768);
  EXPECT_EQ(convert_value<std::int16_t>(32767.9f), 32767);
  EXPECT_EQ(convert_value<std::int16_t>(ferry::bfloat16(-1e30f)), -32768);
}

TEST(NarrowConversions, IntegersWrapAndHalvesRoundOnce) {
  using ferry::kernels::convert_value;
  EXPECT_EQ(convert_value<std::uint8_t>(std::int64_t{300}), 44);
  EXPECT_EQ(convert_value<std::int8_t>(std::uint8_t{200}), -56);
  EXPECT_EQ(convert_value<std::uint8_t>(std::int8_t{-1}), 255);
  EXPECT_EQ(convert_value<std::int16_t>(std::int32_t{40000}), 40000 - 65536);
  EXPECT_EQ(convert_value<std::int32_t>(std::int16_t{-5}), -5);
  EXPECT_EQ(convert_value<float16>(std::int16_t{2049}).bits, 0x6800);
  EXPECT_EQ(convert_value<float16>(std::int32_t{100000}).bits, kInf);
  EXPECT_EQ(convert_value<float16>(std::uint8_t{255}).bits, float16(255.0f).bits);
  EXPECT_TRUE(convert_value<bool>(float16::from_bits(0x0001)));
  EXPECT_FALSE(convert_value<bool>(float16::from_bits(0x8000)));  // -0
  EXPECT_EQ(convert_value<float16>(true).bits, 0x3c00);
  // Between the 16-bit floats, through float, which holds either exactly: one rounding.
  EXPECT_EQ(convert_value<float16>(ferry::bfloat16::from_bits(0x3f81)).bits, 0x3c08);  // 1 + 2^-7
  EXPECT_EQ(convert_value<float16>(ferry::bfloat16(1e6f)).bits, kInf);
  EXPECT_EQ(convert_value<ferry::bfloat16>(float16::from_bits(0x3c01)).bits, 0x3f80);  // 1 + 2^-10
  EXPECT_EQ(convert_value<ferry::bfloat16>(float16(65504.0f)).bits, 0x4780);  // to 65536, even
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {  // double -> half agrees with float -> half here
    const auto h = float16::from_bits(static_cast<std::uint16_t>(p));
    if (is_nan_pattern(h.bits)) continue;
    ASSERT_EQ(convert_value<float16>(static_cast<double>(static_cast<float>(h))).bits, h.bits);
  }
}

// ---- the matmul kernel: float16 accumulates in float, rounds once -------------------------------

TEST(Float16Matmul, AccumulatesInFloatAndRoundsOnce) {
  // 2048 + 1 + 1 + 1 + 1: each partial sum rounded to half would stay 2048 (2049 is a tie that
  // goes to even); in float the sum is 2052, a half.
  const std::vector<float16> a{2048.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<float16> b(5, float16(1.0f));
  float16 c;
  ferry::kernels::gemm(a.data(), b.data(), &c, 1, 5, 1);
  EXPECT_EQ(static_cast<float>(c), 2052.0f);
  // Random products against a plain loop in float, rounded once: equal bits.
  std::mt19937 gen(17);
  std::uniform_int_distribution<int> pick(-64, 64);
  for (const auto& [m, k, n] :
       std::vector<std::array<std::int64_t, 3>>{{3, 7, 5}, {17, 33, 9}, {64, 130, 40}}) {
    std::vector<float16> x(static_cast<std::size_t>(m * k));
    std::vector<float16> y(static_cast<std::size_t>(k * n));
    for (float16& v : x) v = static_cast<float>(pick(gen)) / 16.0f;  // exact products and sums
    for (float16& v : y) v = static_cast<float>(pick(gen)) / 8.0f;
    std::vector<float16> out(static_cast<std::size_t>(m * n));
    ferry::kernels::gemm(x.data(), y.data(), out.data(), m, k, n);
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          acc += static_cast<float>(x[static_cast<std::size_t>(i * k + p)]) *
                 static_cast<float>(y[static_cast<std::size_t>(p * n + j)]);
        }
        ASSERT_EQ(out[static_cast<std::size_t>(i * n + j)].bits, float16(acc).bits)
            << i << "," << j;
      }
    }
  }
}

TEST(NarrowIntegerMatmul, WrapsInTheElementWidth) {
  // Sums far past the type's range, against a plain loop in int64 wrapped once at the end.
  std::mt19937 gen(19);
  std::uniform_int_distribution<int> pick(-128, 127);
  const std::int64_t m = 9, k = 40, n = 11;
  std::vector<std::int8_t> a8(static_cast<std::size_t>(m * k));
  std::vector<std::int8_t> b8(static_cast<std::size_t>(k * n));
  for (auto& v : a8) v = static_cast<std::int8_t>(pick(gen));
  for (auto& v : b8) v = static_cast<std::int8_t>(pick(gen));
  std::vector<std::uint8_t> au(a8.size());
  std::vector<std::uint8_t> bu(b8.size());
  std::vector<std::int16_t> a16(a8.size());
  std::vector<std::int16_t> b16(b8.size());
  for (std::size_t i = 0; i < a8.size(); ++i) {
    au[i] = static_cast<std::uint8_t>(a8[i]);
    a16[i] = static_cast<std::int16_t>(a8[i] * 200);
  }
  for (std::size_t i = 0; i < b8.size(); ++i) {
    bu[i] = static_cast<std::uint8_t>(b8[i]);
    b16[i] = static_cast<std::int16_t>(b8[i] * 250);
  }
  std::vector<std::int8_t> c8(static_cast<std::size_t>(m * n));
  std::vector<std::uint8_t> cu(c8.size());
  std::vector<std::int16_t> c16(c8.size());
  ferry::kernels::gemm(a8.data(), b8.data(), c8.data(), m, k, n);
  ferry::kernels::gemm(au.data(), bu.data(), cu.data(), m, k, n);
  ferry::kernels::gemm(a16.data(), b16.data(), c16.data(), m, k, n);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      std::int64_t s8 = 0, su = 0, s16 = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const auto ia = static_cast<std::size_t>(i * k + p);
        const auto ib = static_cast<std::size_t>(p * n + j);
        s8 += std::int64_t{a8[ia]} * b8[ib];
        su += std::int64_t{au[ia]} * bu[ib];
        s16 += std::int64_t{a16[ia]} * b16[ib];
      }
      const auto at = static_cast<std::size_t>(i * n + j);
      ASSERT_EQ(c8[at], static_cast<std::int8_t>(s8));
      ASSERT_EQ(cu[at], static_cast<std::uint8_t>(su));
      ASSERT_EQ(c16[at], static_cast<std::int16_t>(s16));
    }
  }
}

}  // namespace

}  // namespace test_float16
