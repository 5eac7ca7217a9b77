// bfloat16: rounding from float (round to nearest, ties to even) and from double (one rounding),
// exact widening to float, the behaviour of NaN, zeros, subnormals and overflow, and
// numeric_limits. Every expectation comes from a reference written here from the bit layout
// (1 sign bit, 8 exponent bits, 7 mantissa bits), not from ferry's own rounding code.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include <ferry/core/bfloat16.hpp>
#include <ferry/kernels/convert.hpp>

namespace test_bfloat16 {

namespace {

using ferry::bfloat16;

constexpr std::uint16_t kSign = 0x8000;
constexpr std::uint16_t kInf = 0x7f80;
constexpr std::uint16_t kQuietBit = 0x0040;
constexpr std::uint16_t kMaxFinite = 0x7f7f;

float float_of(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
/// The value of a bfloat16 bit pattern: it is the upper half of a float.
float value_of(std::uint16_t bf16_bits) { return float_of(std::uint32_t{bf16_bits} << 16); }
bool is_nan_pattern(std::uint16_t b) { return (b & 0x7fff) > kInf; }

std::string hex(std::uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

/// Reference rounding of a non-NaN float: its two bfloat16 neighbours are the truncated bit
/// pattern (toward zero) and the next pattern up; pick the nearer one and, on an exact tie, the
/// one whose last mantissa bit is 0. The pattern after the largest finite one is infinity, which
/// for the distance counts as 2^128 (IEEE rounding: overflow is decided as if the exponent
/// range went on).
std::uint16_t reference_bits(float x) {
  const std::uint32_t u = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & kSign);
  const std::uint32_t mag = u & 0x7fffffffU;
  if (mag == 0x7f800000U) return sign | kInf;
  const auto below = static_cast<std::uint16_t>(mag >> 16);
  const auto above = static_cast<std::uint16_t>(below + 1);
  // Differences of floats in one binade are exact in double.
  const double v = std::abs(static_cast<double>(x));
  const double lo = value_of(below);
  const double hi = above == kInf ? 0x1p128 : static_cast<double>(value_of(above));
  const double to_lo = v - lo;
  const double to_hi = hi - v;
  std::uint16_t pick;
  if (to_lo < to_hi) pick = below;
  else if (to_hi < to_lo) pick = above;
  else pick = (below & 1) == 0 ? below : above;
  return sign | pick;
}

/// Reference rounding of a finite double, exact in integers: the value is m * 2^e; find the
/// bfloat16 spacing (ulp) of its binade, split m * 2^e / ulp into a quotient q and a remainder,
/// round q to nearest even. The encoding of q * ulp is then ((ulp exponent + 133) << 7) + q:
/// in the lowest binade (ulp 2^-133) the pattern is q itself (subnormals and the first normals
/// share the spacing), and each binade up adds 128 to the pattern, so a carry of q to 256 moves
/// into the next exponent and past the largest finite value into infinity.
std::uint16_t reference_bits_from_double(double d) {
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
  if (top > 127) return sign | kInf;
  const int ulp = (top < -126 ? -126 : top) - 7;
  const int shift = ulp - e;
  std::uint64_t q = 0;
  if (shift <= 0) {
    q = m << -shift;  // a multiple of the ulp already
  } else if (shift < 64) {
    q = m >> shift;
    const std::uint64_t rem = m & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1) != 0)) ++q;
  }  // else: m < 2^53 is below half an ulp, so q stays 0
  return static_cast<std::uint16_t>(sign | (((ulp + 133) << 7) + q));
}

void expect_rounds(float x, std::uint16_t expected) {
  EXPECT_EQ(bfloat16(x).bits, expected) << "float " << hex(bits_of(x)) << " (" << x << ")";
}

// ---- Compile-time: the conversions are constexpr. -------------------------------------------

static_assert(bfloat16(1.0f).bits == 0x3f80);
static_assert(bfloat16(-2.0f).bits == 0xc000);
static_assert(static_cast<float>(bfloat16::from_bits(0x3fc0)) == 1.5f);

// ---- float -> bfloat16 ------------------------------------------------------------------------

TEST(Bfloat16FromFloat, RepresentableValuesAreExact) {
  expect_rounds(1.0f, 0x3f80);
  expect_rounds(-1.5f, 0xbfc0);
  expect_rounds(0.15625f, 0x3e20);
  expect_rounds(256.0f, 0x4380);
  expect_rounds(0x1.fep127f, kMaxFinite);  // the largest finite bfloat16
  expect_rounds(0x1p-126f, 0x0080);        // the smallest normal
}

TEST(Bfloat16FromFloat, SignedZerosKeepTheirSign) {
  expect_rounds(0.0f, 0x0000);
  expect_rounds(-0.0f, 0x8000);
}

TEST(Bfloat16FromFloat, ExactTiesRoundToTheEvenNeighbour) {
  // 1 + 2^-8 lies halfway between 1 (mantissa 0, even) and 1 + 2^-7 (odd): rounds down.
  expect_rounds(1.0f + 0x1p-8f, 0x3f80);
  expect_rounds(-(1.0f + 0x1p-8f), 0xbf80);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  expect_rounds(1.0f + 0x3p-8f, 0x3f82);
  expect_rounds(-(1.0f + 0x3p-8f), 0xbf82);
  // Every tie: the float halfway after pattern p rounds to p when p is even, to p + 1 when odd.
  for (std::uint32_t p = 0; p < kMaxFinite; ++p) {
    for (std::uint32_t sign : {0U, 0x8000U}) {
      const std::uint32_t pattern = p | sign;
      const float tie = float_of((pattern << 16) | 0x8000U);
      const auto expected = static_cast<std::uint16_t>((p & 1) == 0 ? pattern : pattern + 1);
      ASSERT_EQ(bfloat16(tie).bits, expected) << "tie after " << hex(pattern);
    }
  }
}

TEST(Bfloat16FromFloat, OneUlpFromATieDecidesTheDirection) {
  for (std::uint32_t p = 0; p < kMaxFinite; ++p) {
    for (std::uint32_t sign : {0U, 0x8000U}) {
      const std::uint32_t pattern = p | sign;
      const float below_tie = float_of((pattern << 16) | 0x7fffU);
      const float above_tie = float_of((pattern << 16) | 0x8001U);
      ASSERT_EQ(bfloat16(below_tie).bits, pattern) << hex(bits_of(below_tie));
      ASSERT_EQ(bfloat16(above_tie).bits, pattern + 1) << hex(bits_of(above_tie));
    }
  }
}

TEST(Bfloat16FromFloat, SubnormalsRoundOnTheirOwnGrid) {
  expect_rounds(float_of(0x00000001), 0x0000);   // the smallest float subnormal: to +0
  expect_rounds(float_of(0x80000001), 0x8000);   // and to -0
  expect_rounds(float_of(0x00008000), 0x0000);   // tie between 0 and 2^-133: 0 is even
  expect_rounds(float_of(0x00008001), 0x0001);   // just past it
  expect_rounds(float_of(0x00018000), 0x0002);   // tie between odd 0x0001 and even 0x0002
  expect_rounds(0x1p-133f, 0x0001);              // the smallest bfloat16 subnormal, exact
  expect_rounds(float_of(0x007fffff), 0x0080);   // the largest float subnormal carries to normal
  expect_rounds(float_of(0x807f0000), 0x807f);   // a bfloat16 subnormal, negative, exact
}

TEST(Bfloat16FromFloat, LargestFiniteValuesOverflowToInfinity) {
  expect_rounds(std::numeric_limits<float>::max(), kInf);
  expect_rounds(std::numeric_limits<float>::lowest(), kSign | kInf);
  // The tie above the largest finite bfloat16 (odd mantissa) rounds to infinity...
  expect_rounds(float_of(0x7f7f8000), kInf);
  expect_rounds(float_of(0xff7f8000), kSign | kInf);
  // ...and one float ulp below it stays finite.
  expect_rounds(float_of(0x7f7f7fff), kMaxFinite);
  expect_rounds(float_of(0xff7f7fff), kSign | kMaxFinite);
}

TEST(Bfloat16FromFloat, InfinitiesStay) {
  expect_rounds(std::numeric_limits<float>::infinity(), kInf);
  expect_rounds(-std::numeric_limits<float>::infinity(), kSign | kInf);
}

TEST(Bfloat16FromFloat, NanStaysAQuietNanWithItsSign) {
  // Quiet and signalling NaNs, including payloads only in the low half (truncating those would
  // give infinity) and the one whose rounding carry would run into the sign bit.
  for (std::uint32_t nan : {0x7fc00000U, 0x7f800001U, 0x7fa00000U, 0x7fbfffffU, 0x7fffffffU,
                            0xffc00000U, 0xff800001U, 0xffffffffU, 0x7f80ffffU}) {
    const std::uint16_t b = bfloat16(float_of(nan)).bits;
    EXPECT_TRUE(is_nan_pattern(b)) << hex(nan) << " gave " << hex(b);
    EXPECT_NE(b & kQuietBit, 0) << hex(nan) << " gave a signalling NaN " << hex(b);
    EXPECT_EQ(b & kSign, (nan >> 16) & kSign) << hex(nan) << " lost its sign: " << hex(b);
  }
}

TEST(Bfloat16FromFloat, MatchesTheReferenceOnEveryUpperHalfAndSampledLowerHalves) {
  // Every bfloat16 pattern as upper half, with the low halves where rounding changes direction,
  // plus a few random ones.
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> low(0, 0xffff);
  for (std::uint32_t upper = 0; upper <= 0xffff; ++upper) {
    if (is_nan_pattern(static_cast<std::uint16_t>(upper))) continue;  // NaN has its own test
    for (std::uint32_t lower : {0x0000U, 0x0001U, 0x7fffU, 0x8000U, 0x8001U, 0xffffU, low(gen),
                                low(gen)}) {
      const std::uint32_t u = (upper << 16) | lower;
      if ((u & 0x7fffffffU) > 0x7f800000U) continue;  // infinity's pattern plus low bits: NaN
      const float x = float_of(u);
      ASSERT_EQ(bfloat16(x).bits, reference_bits(x)) << hex(u);
    }
  }
}

// ---- bfloat16 -> float and back ---------------------------------------------------------------

TEST(Bfloat16ToFloat, IsExactForEveryPattern) {
  // The float's upper half is the pattern, its lower half zero: NaN payloads included.
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {
    const float f = bfloat16::from_bits(static_cast<std::uint16_t>(p));
    ASSERT_EQ(bits_of(f), p << 16) << hex(p);
  }
}

TEST(Bfloat16ToFloat, KnownValues) {
  EXPECT_EQ(static_cast<float>(bfloat16::from_bits(0x3f80)), 1.0f);
  EXPECT_EQ(static_cast<float>(bfloat16::from_bits(0xc0a0)), -5.0f);
  EXPECT_EQ(static_cast<float>(bfloat16::from_bits(0x0001)), 0x1p-133f);
  EXPECT_EQ(static_cast<float>(bfloat16::from_bits(0x7f7f)), 0x1.fep127f);
  EXPECT_TRUE(std::isinf(static_cast<float>(bfloat16::from_bits(0xff80))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16::from_bits(0x7fc0))));
}

TEST(Bfloat16RoundTrip, EveryPatternSurvivesFloatAndBack) {
  for (std::uint32_t p = 0; p <= 0xffff; ++p) {
    const auto pattern = static_cast<std::uint16_t>(p);
    const bfloat16 back(static_cast<float>(bfloat16::from_bits(pattern)));
    if (is_nan_pattern(pattern)) {
      // NaN stays NaN with its sign; a signalling one comes back quiet.
      ASSERT_TRUE(is_nan_pattern(back.bits)) << hex(p);
      ASSERT_EQ(back.bits, pattern | kQuietBit) << hex(p);
    } else {
      ASSERT_EQ(back.bits, pattern) << hex(p);
    }
  }
}

TEST(Bfloat16RoundTrip, ImplicitConversionsBothWays) {
  const bfloat16 x = 2.5f;  // implicit from float
  const float y = x;        // implicit to float
  EXPECT_EQ(y, 2.5f);
  const bfloat16 z = 0.1f;  // not representable: rounds
  EXPECT_EQ(z.bits, 0x3dcd);
  EXPECT_EQ(bfloat16().bits, 0);  // value-initialized is +0
}

// ---- numeric_limits ---------------------------------------------------------------------------

TEST(Bfloat16Limits, ValuesFollowTheFormat) {
  using L = std::numeric_limits<bfloat16>;
  static_assert(L::is_specialized && L::is_signed && !L::is_integer && !L::is_exact);
  static_assert(L::has_infinity && L::has_quiet_NaN && L::radix == 2);
  static_assert(L::digits == 8);  // 7 stored mantissa bits and the implicit one
  EXPECT_EQ(static_cast<float>(L::min()), 0x1p-126f);
  EXPECT_EQ(static_cast<float>(L::max()), 0x1.fep127f);
  EXPECT_EQ(static_cast<float>(L::lowest()), -0x1.fep127f);
  // epsilon: the distance from 1 to the next representable value.
  EXPECT_EQ(static_cast<float>(L::epsilon()),
            static_cast<float>(bfloat16::from_bits(0x3f81)) - 1.0f);
  EXPECT_EQ(static_cast<float>(L::epsilon()), 0x1p-7f);
  EXPECT_EQ(static_cast<float>(L::infinity()), std::numeric_limits<float>::infinity());
  const bfloat16 nan = L::quiet_NaN();
  EXPECT_TRUE(std::isnan(static_cast<float>(nan)));
  EXPECT_NE(nan.bits & kQuietBit, 0);
  // max() is the largest finite value: one pattern up is infinity.
  EXPECT_EQ(L::max().bits + 1, L::infinity().bits);
}

TEST(Bfloat16Limits, TheRestOfTheMembersAreDefined) {
  using L = std::numeric_limits<bfloat16>;
  static_assert(L::has_signaling_NaN && L::has_denorm == std::denorm_present);
  static_assert(!L::has_denorm_loss && L::is_bounded && !L::is_modulo && !L::is_iec559);
  static_assert(L::round_style == std::round_to_nearest);
  // digits10: decimal digits that survive a round trip; max_digits10: needed to round-trip.
  EXPECT_EQ(L::digits10, static_cast<int>(std::floor((L::digits - 1) * std::log10(2.0))));
  EXPECT_EQ(L::max_digits10, static_cast<int>(std::ceil(1 + L::digits * std::log10(2.0))));
  // 2^(min_exponent - 1) is the smallest normal and 2^(max_exponent - 1) the largest power of
  // two; 10^min_exponent10 and 10^max_exponent10 are normal and finite, one decade more is not.
  EXPECT_EQ(std::ldexp(1.0f, L::min_exponent - 1), static_cast<float>(L::min()));
  EXPECT_EQ(bfloat16(std::ldexp(1.0f, L::max_exponent - 1)).bits, 0x7f00);
  EXPECT_EQ(bfloat16(std::ldexp(1.0f, L::max_exponent)).bits, kInf);
  EXPECT_GE(std::pow(10.0, L::min_exponent10), static_cast<double>(L::min()));
  EXPECT_LT(std::pow(10.0, L::min_exponent10 - 1), static_cast<double>(L::min()));
  EXPECT_LE(std::pow(10.0, L::max_exponent10), static_cast<double>(L::max()));
  EXPECT_GT(std::pow(10.0, L::max_exponent10 + 1), static_cast<double>(L::max()));
  EXPECT_EQ(static_cast<float>(L::round_error()), 0.5f);
  EXPECT_EQ(static_cast<float>(L::denorm_min()), 0x1p-133f);
  const bfloat16 snan = L::signaling_NaN();
  EXPECT_TRUE(std::isnan(static_cast<float>(snan)));
  EXPECT_EQ(snan.bits & kQuietBit, 0);
}

// ---- double -> bfloat16 in one rounding ------------------------------------------------------

void expect_from_double(double d, std::uint16_t expected) {
  EXPECT_EQ(ferry::kernels::bfloat16_from_double(d).bits, expected) << std::hexfloat << d;
  EXPECT_EQ(reference_bits_from_double(d), expected) << "the reference disagrees on "
                                                     << std::hexfloat << d;
}

TEST(Bfloat16FromDouble, RoundsOnceWhereGoingThroughFloatWouldRoundTwice) {
  // 1 + 2^-8 + 2^-30 is just above the tie between 1 and 1 + 2^-7, so it rounds up. As a float
  // it would first become the tie itself (2^-30 is below half a float ulp) and then round down.
  const double above_tie = 1.0 + 0x1p-8 + 0x1p-30;
  ASSERT_EQ(bfloat16(static_cast<float>(above_tie)).bits, 0x3f80);  // the double rounding
  expect_from_double(above_tie, 0x3f81);
  expect_from_double(-above_tie, 0xbf81);
  // Just below the tie between odd 1 + 2^-7 and even 1 + 2^-6: rounds down, to the odd one.
  const double below_tie = 1.0 + 0x3p-8 - 0x1p-30;
  ASSERT_EQ(bfloat16(static_cast<float>(below_tie)).bits, 0x3f82);
  expect_from_double(below_tie, 0x3f81);
  // Below the overflow threshold (halfway from max() to 2^128): finite, although as a float it
  // would round to the threshold and then to infinity.
  const double below_overflow = 0x1p128 - 0x1p119 - 0x1p76;
  ASSERT_EQ(bfloat16(static_cast<float>(below_overflow)).bits, kInf);
  expect_from_double(below_overflow, kMaxFinite);
  // In the subnormal range: just above the tie between 0 and 2^-133.
  const double tiny_above_tie = 0x1p-134 + 0x1p-170;
  ASSERT_EQ(bfloat16(static_cast<float>(tiny_above_tie)).bits, 0x0000);
  expect_from_double(tiny_above_tie, 0x0001);
}

TEST(Bfloat16FromDouble, ExactTiesAndSpecialValues) {
  expect_from_double(1.0 + 0x1p-8, 0x3f80);
  expect_from_double(1.0 + 0x3p-8, 0x3f82);
  expect_from_double(0x1p-134, 0x0000);
  expect_from_double(0x3p-134, 0x0002);
  expect_from_double(0x1p-133, 0x0001);
  expect_from_double(0x1p128 - 0x1p119, kInf);  // the overflow threshold itself: a tie, to even
  expect_from_double(std::numeric_limits<double>::max(), kInf);
  expect_from_double(-1e300, kSign | kInf);
  expect_from_double(1e-300, 0x0000);
  expect_from_double(-1e-300, kSign);
  expect_from_double(0.0, 0x0000);
  expect_from_double(-0.0, kSign);
  expect_from_double(std::numeric_limits<double>::denorm_min(), 0x0000);
  EXPECT_EQ(ferry::kernels::bfloat16_from_double(std::numeric_limits<double>::infinity()).bits,
            kInf);
  EXPECT_EQ(ferry::kernels::bfloat16_from_double(-std::numeric_limits<double>::infinity()).bits,
            kSign | kInf);
  for (double nan : {std::numeric_limits<double>::quiet_NaN(),
                     -std::numeric_limits<double>::quiet_NaN()}) {
    const std::uint16_t b = ferry::kernels::bfloat16_from_double(nan).bits;
    EXPECT_TRUE(is_nan_pattern(b)) << hex(b);
    EXPECT_EQ(b & kSign, std::signbit(nan) ? kSign : 0) << hex(b);
  }
}

TEST(Bfloat16FromDouble, MatchesTheReferenceNearTiesAndAcrossTheRange) {
  std::mt19937_64 gen(11);
  // Near every kind of tie: the midpoint of two neighbours, one double ulp either side, and a
  // float-invisible offset either side.
  std::uniform_int_distribution<std::uint32_t> pattern(0, kMaxFinite - 1);
  for (int i = 0; i < 20000; ++i) {
    const auto p = static_cast<std::uint16_t>(pattern(gen));
    const double lo = value_of(p);
    const double hi = value_of(static_cast<std::uint16_t>(p + 1));
    const double mid = lo + (hi - lo) / 2;  // exact: a few more bits than a bfloat16
    for (double d : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300),
                     mid + (hi - lo) * 0x1p-30, mid - (hi - lo) * 0x1p-30}) {
      for (double s : {d, -d}) {
        ASSERT_EQ(ferry::kernels::bfloat16_from_double(s).bits, reference_bits_from_double(s))
            << std::hexfloat << s;
      }
    }
  }
  // Random doubles with exponents from below the subnormals to beyond the overflow.
  std::uniform_int_distribution<std::uint64_t> mantissa(0, (std::uint64_t{1} << 52) - 1);
  std::uniform_int_distribution<std::uint64_t> exponent(1023 - 140, 1023 + 130);
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t u = ((gen() & 1) << 63) | (exponent(gen) << 52) | mantissa(gen);
    const double d = std::bit_cast<double>(u);
    ASSERT_EQ(ferry::kernels::bfloat16_from_double(d).bits, reference_bits_from_double(d))
        << std::hexfloat << d;
  }
}

TEST(Bfloat16FromDouble, TheTwoReferencesAgreeOnFloats) {
  // A check on the references themselves: for a float input both must give the same pattern.
  std::mt19937 gen(3);
  for (int i = 0; i < 100000; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(gen());
    if ((u & 0x7fffffffU) >= 0x7f800000U) continue;
    const float x = float_of(u);
    ASSERT_EQ(reference_bits(x), reference_bits_from_double(x)) << hex(u);
  }
}

}  // namespace

}  // namespace test_bfloat16
