// zeros, ones, full and arange: every element type each accepts, shapes from scalar to zero-size,
// on every executor kind; arange's length rule, negative and fractional steps, empty ranges,
// exact integer progressions, and the errors thrown at the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_creation {

namespace {

using ferry::bfloat16;
using ferry::Shape;

using ElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, bfloat16, bool>;

struct TypeNames {
  template <class T>
  static std::string GetName(int) {
    return std::string(ferry::name_of(ferry::dtype_of<T>));
  }
};

float value_of(bfloat16 b) { return std::bit_cast<float>(std::uint32_t{b.bits} << 16); }
float value_of(std::uint16_t bits) { return value_of(bfloat16::from_bits(bits)); }

/// Bit-for-bit equality: a fill copies its value (a NaN's payload and a zero's sign included),
/// and the reference below computes each arange value exactly as documented, so no tolerance.
template <class T>
bool identical(T a, T b) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return a.bits == b.bits;
  } else if constexpr (std::is_floating_point_v<T>) {
    using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    return std::bit_cast<Bits>(a) == std::bit_cast<Bits>(b);
  } else {
    return a == b;
  }
}

template <class T>
std::string describe(T v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, bfloat16>) {
    s << value_of(v) << " (bits 0x" << std::hex << v.bits << ")";
  } else if constexpr (std::is_floating_point_v<T>) {
    s << v << " (" << std::hexfloat << v << ")";
  } else {
    s << +v;
  }
  return s.str();
}

template <class T>
void expect_values_exactly(const std::vector<T>& expected, const ferry::DeviceArray<T>& a) {
  EXPECT_EQ(a.dtype(), ferry::dtype_of<T>);
  const ferry::HostArray<T> h = a.to_host();
  ASSERT_EQ(h.data().size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(identical<T>(expected[i], h.data()[i]))
        << "at " << i << ": got " << describe<T>(h.data()[i]) << ", expected "
        << describe<T>(expected[i]);
  }
}

// ---- zeros, ones, full ------------------------------------------------------------------------

const std::vector<Shape>& test_shapes() {
  static const std::vector<Shape> shapes{Shape{},  Shape{0},    Shape{3, 0, 2},
                                         Shape{7}, Shape{2, 3}, Shape{4, 1, 5}};
  return shapes;
}

template <class T>
T zero_of() {
  if constexpr (std::is_same_v<T, bfloat16>) return bfloat16::from_bits(0x0000);  // +0
  else return static_cast<T>(0);
}

template <class T>
T one_of() {
  if constexpr (std::is_same_v<T, bfloat16>) return bfloat16::from_bits(0x3f80);
  else if constexpr (std::is_same_v<T, bool>) return true;
  else return static_cast<T>(1);
}

/// Fill values a conversion or arithmetic on the way would change: signed zeros, NaN payloads,
/// infinities, subnormals, integer limits.
template <class T>
std::vector<T> fill_values() {
  if constexpr (std::is_same_v<T, float>) {
    return {-0.0f, 2.5f, std::bit_cast<float>(0x7fc00001U), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::denorm_min()};
  } else if constexpr (std::is_same_v<T, double>) {
    return {-0.0, 0.1, std::bit_cast<double>(0xfff8000000000001ULL),
            std::numeric_limits<double>::infinity(), std::numeric_limits<double>::denorm_min()};
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return {std::numeric_limits<std::int32_t>::min(), -7, std::numeric_limits<std::int32_t>::max()};
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return {bfloat16::from_bits(0x8000), bfloat16::from_bits(0x7fc1), bfloat16::from_bits(0x0001),
            bfloat16::from_bits(0xff80), bfloat16::from_bits(0x3fc0)};
  } else {
    return {true, false};
  }
}

template <class T>
void expect_filled(const ferry::DeviceArray<T>& a, const Shape& shape, T value) {
  EXPECT_EQ(a.shape(), shape);
  expect_values_exactly(std::vector<T>(static_cast<std::size_t>(shape.numel()), value), a);
}

template <class T>
class Creation : public ::testing::Test {};
TYPED_TEST_SUITE(Creation, ElementTypes, TypeNames);

TYPED_TEST(Creation, ZerosOnEveryShape) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    for (const Shape& shape : test_shapes()) {
      SCOPED_TRACE(shape.to_string());
      expect_filled(ferry::zeros<T>(dev, shape), shape, zero_of<T>());
    }
  });
}

TYPED_TEST(Creation, OnesOnEveryShape) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    for (const Shape& shape : test_shapes()) {
      SCOPED_TRACE(shape.to_string());
      expect_filled(ferry::ones<T>(dev, shape), shape, one_of<T>());
    }
  });
}

TYPED_TEST(Creation, FullKeepsEveryBitOfTheValue) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    for (const Shape& shape : test_shapes()) {
      for (T value : fill_values<T>()) {
        SCOPED_TRACE(shape.to_string() + " of " + describe(value));
        expect_filled(ferry::full<T>(dev, shape, value), shape, value);
      }
    }
  });
}

TEST(CreationManual, FillsRunOnlyWhenAnExportDrivesThem) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  const auto z = ferry::zeros<float>(dev, Shape{2, 2});
  const auto r = ferry::arange<std::int32_t>(dev, 4);
  EXPECT_EQ(z.shape(), (Shape{2, 2}));  // metadata at once
  EXPECT_EQ(r.shape(), Shape{4});
  EXPECT_FALSE(z.ready());
  EXPECT_FALSE(r.ready());
  EXPECT_EQ(manual.ready_count(), 2u);  // no inputs: both ready to run, neither has run
  expect_values_exactly({0, 1, 2, 3}, r);
}

TEST(CreationErrors, NegativeSizesAreRejectedWhenTheShapeIsBuilt) {
  ferry::Device dev;
  EXPECT_THROW((void)ferry::zeros<float>(dev, {2, -1}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::ones<bool>(dev, Shape{-1}), ferry::InvalidArgument);
  try {
    (void)ferry::full<std::int32_t>(dev, {4, 0, -3}, 7);
    FAIL() << "expected InvalidArgument";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "[Shape] negative size -3 in dimension 2");
  }
}

// ---- arange -----------------------------------------------------------------------------------

/// The bfloat16 nearest to `d` (|d| < 2^128), ties to the even pattern, found by bisection:
/// the non-negative finite patterns 0x0000..0x7f7f increase with their value. Pattern 0x7f80
/// (infinity) stands for 2^128 as the upper neighbour of the largest finite value.
bfloat16 nearest_bfloat16(double d) {
  const double a = std::abs(d);
  std::uint16_t lo = 0;
  std::uint16_t hi = 0x7f80;  // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (value_of(mid) <= a) lo = mid;
    else hi = mid;
  }
  const double below = a - value_of(lo);  // exact: neighbours of a, in one binade
  const double above = (hi == 0x7f80 ? 0x1p128 : static_cast<double>(value_of(hi))) - a;
  std::uint16_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  if (std::signbit(d)) pick |= 0x8000;
  return bfloat16::from_bits(pick);
}

/// The float16 nearest to `d` (|d| < 65504 here), ties to the even pattern, by the same
/// bisection over the ordered non-negative patterns 0x0000..0x7bff.
ferry::float16 nearest_float16(double d) {
  const auto value = [](std::uint16_t bits) {
    const int e = bits >> 10;
    const int m = bits & 0x3ff;
    return e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  };
  const double a = std::abs(d);
  std::uint16_t lo = 0;
  std::uint16_t hi = 0x7bff;  // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (value(mid) <= a) lo = mid;
    else hi = mid;
  }
  const double below = a - value(lo);
  const double above = value(hi) - a;
  std::uint16_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  if (std::signbit(d)) pick |= 0x8000;
  return ferry::float16::from_bits(pick);
}

/// The documented conversion of an arange value (computed in double) to T.
template <class T>
T converted(double v) {
  if constexpr (std::is_same_v<T, bfloat16>) return nearest_bfloat16(v);
  else if constexpr (std::is_same_v<T, ferry::float16>) return nearest_float16(v);
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(std::trunc(v));  // in range here
  else return static_cast<T>(v);
}

/// Expected arange values from the values as exact doubles, written out by hand in the tests.
template <class T>
std::vector<T> converted_all(const std::vector<double>& values) {
  std::vector<T> out;
  for (double v : values) out.push_back(converted<T>(v));
  return out;
}

template <class T>
class CreationArange : public ::testing::Test {};
TYPED_TEST_SUITE(CreationArange, ferry_test::NumericTypes, TypeNames);

TYPED_TEST(CreationArange, CountsFromZero) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    // Every value is exact in each type: up to 256, or 100 in the 8-bit ones (int8 stops at 127).
    const std::int64_t top = sizeof(T) == 1 ? 100 : 256;
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, top}) {
      SCOPED_TRACE(n);
      const auto a = ferry::arange<T>(dev, n);
      EXPECT_EQ(a.shape(), Shape{n});
      std::vector<T> expected;
      for (std::int64_t i = 0; i < n; ++i) expected.push_back(converted<T>(static_cast<double>(i)));
      expect_values_exactly(expected, a);
    }
  });
}

struct RangeCase {
  double start;
  double stop;
  double step;
  std::vector<double> values;  // as exact doubles, before conversion to T
};

TYPED_TEST(CreationArange, StartStopAndStep) {
  using T = TypeParam;
  const std::vector<RangeCase> cases{
      {0, 10, 3, {0, 3, 6, 9}},
      {10, 0, -3, {10, 7, 4, 1}},  // a negative step counts down, above stop
      {-5, 5, 2, {-5, -3, -1, 1, 3}},
      {2, 3, 1, {2}},
      {0, 2.5, 1, {0, 1, 2}},           // a fractional stop
      {0.5, 3, 1, {0.5, 1.5, 2.5}},     // a fractional start: integers truncate it
      {0, 1, 0.25, {0, 0.25, 0.5, 0.75}},
      {1, 0, -0.25, {1, 0.75, 0.5, 0.25}},
      {-1, -2.25, -0.5, {-1, -1.5, -2}},
      {5, 5, 1, {}},                    // empty: start == stop
      {5, 0, 1, {}},                    // empty: stop behind start
      {0, 5, -1, {}},                   // empty: the step points away from stop
      {0, 0.5, -0.1, {}},
  };
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    for (const RangeCase& c : cases) {
      // uint8 holds no negative values: those ranges wrap or saturate (kernels::convert_value).
      const bool negative =
          std::any_of(c.values.begin(), c.values.end(), [](double v) { return v < 0; });
      if (std::is_unsigned_v<T> && negative) continue;
      SCOPED_TRACE("arange(" + std::to_string(c.start) + ", " + std::to_string(c.stop) + ", " +
                   std::to_string(c.step) + ")");
      const auto a = ferry::arange<T>(dev, c.start, c.stop, c.step);
      EXPECT_EQ(a.shape(), Shape{c.values.size()});
      expect_values_exactly(converted_all<T>(c.values), a);
    }
  });
}

TYPED_TEST(CreationArange, FractionalStepsFollowNumpysLengthRule) {
  // The length is ceil((stop - start) / step) and value i is start + i * step, both in double.
  // (1.3 - 1) / 0.1 rounds to just above 3, so arange(1, 1.3, 0.1) has 4 values and the last,
  // 1 + 3 * 0.1, is exactly 1.3: stop itself (NumPy's documented wart, kept for parity).
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    expect_values_exactly(converted_all<T>({0, 0.1, 0.2}), ferry::arange<T>(dev, 0, 0.3, 0.1));
    expect_values_exactly(converted_all<T>({1, 1.1, 1.2, 1.3}),
                          ferry::arange<T>(dev, 1, 1.3, 0.1));
    expect_values_exactly(converted_all<T>({0, -0.1, -0.2, -0.30000000000000004}),
                          ferry::arange<T>(dev, 0, -0.35, -0.1));
  });
}

TEST(CreationArangeValues, EachValueIsComputedOnceNotAccumulated) {
  // Adding 0.1 ten thousand times in float drifts by whole ulps; start + i * step in double,
  // rounded once, does not.
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto a = ferry::arange<float>(dev, 0, 999.95, 0.1);
    ASSERT_EQ(a.shape(), Shape{10000});
    std::vector<float> expected;
    for (int i = 0; i < 10000; ++i) expected.push_back(static_cast<float>(i * 0.1));
    expect_values_exactly(expected, a);
    float accumulated = 0;
    for (int i = 0; i < 9999; ++i) accumulated += 0.1f;
    EXPECT_NE(accumulated, expected.back());  // shows the test would catch accumulation
  });
}

TEST(CreationArangeValues, BfloatRoundsEachValueToNearestEven) {
  // Above 256 bfloat16 has a spacing of 2: odd integers are ties, which go to the value whose
  // mantissa is even (256, 260, 264 have even mantissas; 258, 262 odd).
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto a = ferry::arange<bfloat16>(dev, 256, 266);
    std::vector<bfloat16> expected;
    for (float v : {256.f, 256.f, 258.f, 260.f, 260.f, 260.f, 262.f, 264.f, 264.f, 264.f}) {
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);  // exact: upper half only
      expected.push_back(bfloat16::from_bits(static_cast<std::uint16_t>(bits >> 16)));
    }
    expect_values_exactly(expected, a);
    // And fractional values: 0.1 is 0x3dcd, the nearest of its neighbours 0x3dcc and 0x3dcd.
    expect_values_exactly(converted_all<bfloat16>({0, 0.1, 0.2, 0.30000000000000004}),
                          ferry::arange<bfloat16>(dev, 0, 0.35, 0.1));
    EXPECT_EQ(nearest_bfloat16(0.1).bits, 0x3dcd);
  });
}

TEST(CreationArangeValues, IntegerProgressionsAreExact) {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    // 2^53 + 1 has no double: an integer arange must not go through double.
    constexpr std::int64_t p53 = std::int64_t{1} << 53;
    std::vector<std::int64_t> up;
    for (std::int64_t i = 0; i < 6; ++i) up.push_back(p53 + i);
    expect_values_exactly(up, ferry::arange<std::int64_t>(dev, 0x1p53, 0x1p53 + 6, 1));
    // Near -2^60 doubles are 256 apart; the bounds are doubles, the values in between are not.
    constexpr std::int64_t p60 = std::int64_t{1} << 60;
    std::vector<std::int64_t> down;
    for (std::int64_t i = 0; i < 86; ++i) down.push_back(-p60 - 3 * i);  // 86 = ceil(256 / 3)
    expect_values_exactly(down, ferry::arange<std::int64_t>(dev, -0x1p60, -0x1p60 - 256, -3));
    expect_values_exactly({-7, -2, 3}, ferry::arange<std::int32_t>(dev, -7, 8, 5));
  });
}

TEST(CreationArangeValues, IntegerProgressionsWrapLikeIntegerArithmetic) {
  // Documented in kernels/fill.hpp: the int32 progression wraps past INT32_MAX like `+` does.
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    expect_values_exactly<std::int32_t>({2147483646, 2147483647, -2147483647 - 1},
                                        ferry::arange<std::int32_t>(dev, 2147483646, 2147483649));
  });
}

TEST(CreationArangeValues, BoundsBeyondInt64ConvertWithSaturation) {
  // A start or step that no int64 holds takes the double path: each value saturates.
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
    expect_values_exactly({max, max}, ferry::arange<std::int64_t>(dev, 1e19, 1e19 + 4096, 2048));
    expect_values_exactly({0}, ferry::arange<std::int32_t>(dev, 0, 1, 1e30));
    expect_values_exactly({-2147483647 - 1, -2147483647 - 1},
                          ferry::arange<std::int32_t>(dev, -1e19, -2e19, -5e18));
  });
}

/// The message of the InvalidArgument that `f` throws.
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const ferry::InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

TEST(CreationArangeErrors, NegativeLength) {
  ferry::Device dev;
  EXPECT_THROW((void)ferry::arange<float>(dev, -1), ferry::InvalidArgument);
  EXPECT_EQ(invalid_argument_message([&] { (void)ferry::arange<std::int64_t>(dev, -5); }),
            "[arange] negative length -5");
}

TEST(CreationArangeErrors, ZeroOrNonFiniteStepAndNonFiniteBounds) {
  ferry::Device dev;
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW((void)ferry::arange<float>(dev, 0, 5, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<std::int32_t>(dev, 0, 5, -0.0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<double>(dev, 0, 5, inf), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<double>(dev, 0, 5, nan), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<bfloat16>(dev, -inf, 5, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<std::int64_t>(dev, 0, inf, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<float>(dev, nan, 5, 1), ferry::InvalidArgument);
  EXPECT_EQ(invalid_argument_message([&] { (void)ferry::arange<float>(dev, 0, 5, 0); }),
            "[arange] needs finite bounds and a non-zero step, got start 0, stop 5, step 0");
  // Values print exactly: a small step stays visible next to the bound at fault.
  EXPECT_EQ(invalid_argument_message([&] { (void)ferry::arange<float>(dev, nan, 1, 1e-9); }),
            "[arange] needs finite bounds and a non-zero step, got start nan, stop 1, step 1e-09");
  EXPECT_EQ(invalid_argument_message([&] { (void)ferry::arange<double>(dev, 0.5, -inf, -2); }),
            "[arange] needs finite bounds and a non-zero step, got start 0.5, stop -inf, step -2");
}

TEST(CreationArangeErrors, LengthTooLarge) {
  ferry::Device dev;
  EXPECT_EQ(invalid_argument_message([&] { (void)ferry::arange<float>(dev, 0, 0x1p63, 1); }),
            "[arange] length 9223372036854775808 is too large");
  // stop - start overflows to infinity.
  EXPECT_THROW((void)ferry::arange<double>(dev, -1e308, 1e308, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<std::int64_t>(dev, 0, 1, 1e-300), ferry::InvalidArgument);
}

/// The integer (SymInt) overload: its length was int64 arithmetic that wrapped, and a wrapped
/// length, clamped to 0, gave an empty range and no error.
TEST(CreationArangeErrors, AnIntegerLengthThatWouldWrapIsRefused) {
  ferry::Device dev;
  const auto arange = [&](std::int64_t start, std::int64_t stop, std::int64_t step) {
    return ferry::arange<std::int8_t>(dev, ferry::SymInt(start), ferry::SymInt(stop),
                                      ferry::SymInt(step));
  };
  constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t least = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(invalid_argument_message([&] { (void)arange(-10, most, 1); }),
            "[arange] length of start -10, stop 9223372036854775807, step 1 is too large (past "
            "2^62)");
  EXPECT_THROW((void)arange(-2, most, 2), ferry::InvalidArgument);  // 2^62 + 1 values
  EXPECT_THROW((void)arange(0, most, 1), ferry::InvalidArgument);  // 2^63 - 1 values
  EXPECT_THROW((void)arange(most, least, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)arange(0, (std::int64_t{1} << 62) + 1, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)arange(least, most, most), ferry::InvalidArgument);  // stop - start wraps
  // Large bounds whose length arithmetic fits: a few values.
  EXPECT_EQ(arange(0, std::int64_t{1} << 62, std::int64_t{1} << 60).shape(), Shape{4});
  EXPECT_EQ(arange(std::int64_t{1} << 61, -(std::int64_t{1} << 61), -(std::int64_t{1} << 60))
                .shape(),
            Shape{4});
  EXPECT_EQ(arange(5, 2, 1).shape(), Shape{0});  // empty, as before
}

/// A step as large as int64 allows: one value. The length's rounding up, stop - start + step - 1,
/// wrapped and the call was refused as too long.
TEST(CreationArangeErrors, AStepPastTheSpanGivesOneValue) {
  ferry::Device dev;
  const auto arange = [&](std::int64_t start, std::int64_t stop, std::int64_t step) {
    return ferry::arange<std::int64_t>(dev, ferry::SymInt(start), ferry::SymInt(stop),
                                       ferry::SymInt(step));
  };
  constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t least = std::numeric_limits<std::int64_t>::min();
  expect_values_exactly({0}, arange(0, 5, most));
  expect_values_exactly({0}, arange(0, -5, least));
  expect_values_exactly({0}, arange(0, -5, least + 1));
  expect_values_exactly({0}, arange(0, least + 1, least));
  expect_values_exactly({-1, most - 2}, arange(-1, most - 1, most - 1));
  EXPECT_EQ(arange(0, 5, least).shape(), Shape{0});
  EXPECT_EQ(arange(0, -5, most).shape(), Shape{0});
  // A few values whose bounds are int64's own: stop - start wraps, which the docs refuse.
  EXPECT_EQ(invalid_argument_message([&] { (void)arange(least, most, most); }),
            "[arange] stop - start overflows int64 for start -9223372036854775808, stop "
            "9223372036854775807, step 9223372036854775807");
}

/// A span past the double range is refused as that, not as a range of inf values.
TEST(CreationArangeErrors, ASpanPastTheDoubleRangeIsNamed) {
  ferry::Device dev;
  EXPECT_EQ(
      invalid_argument_message([&] { (void)ferry::arange<double>(dev, -1e308, 1e308, 1e306); }),
      "[arange] stop - start overflows double for start -1e+308, stop 1e+308, step 1e+306");
  EXPECT_EQ(ferry::arange<double>(dev, -1e308, 0, 1e306).shape(), Shape{100});
}

TEST(CreationArangeErrors, ThrowAtTheCallWithoutAddingAStep) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  EXPECT_THROW((void)ferry::arange<float>(dev, 0, 5, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<float>(dev, -2), ferry::InvalidArgument);
  EXPECT_EQ(manual.ready_count(), 0u);
  (void)ferry::arange<float>(dev, 2);  // the control: a valid call adds one
  EXPECT_EQ(manual.ready_count(), 1u);
}

}  // namespace

}  // namespace test_creation
