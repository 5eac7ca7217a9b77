// Comparisons and selection: less, greater and equal give bool masks (array-array,
// array-scalar, scalar-array, broadcast; NaN compares false), and where(mask, a, b) picks from
// two arrays or an array and a scalar, with mask, a and b broadcast together. Every result is
// checked against a plain loop written here; errors are checked for type and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_compare {

namespace {

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::bfloat16;
using ferry::DeviceArray;
using ferry::Shape;
using ferry_test::OnEachExecutor;

template <class T>
inline constexpr bool kInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <class T>
inline constexpr bool kHalf = ferry::HalfFloating<T>;

// bfloat16 and float16 compare and print as the float they stand for; every other type as
// itself.
template <class T>
using Plain = std::conditional_t<kHalf<T>, float, T>;

template <class T>
Plain<T> plain(T x) {
  return static_cast<Plain<T>>(x);
}

template <class T>
bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<Plain<T>>) {
    return std::isnan(plain(x));
  } else {
    return false;
  }
}

std::size_t count_of(const Shape& s) { return static_cast<std::size_t>(s.numel()); }

// Values from a small set (-2, -1.5, ..., 2 for floating types; -4..4 for integers), so equal
// pairs are common and equal, less and greater all see both outcomes.
template <class T>
std::vector<T> coarse_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-4, 4);
  std::vector<T> v;
  for (std::size_t i = 0; i < n; ++i) {
    const int k = dist(gen);
    if constexpr (kInt<T>) {
      v.push_back(static_cast<T>(k));
    } else {
      v.push_back(static_cast<T>(static_cast<float>(k) * 0.5F));
    }
  }
  return v;
}

void expect_mask(const std::vector<bool>& expected, const ferry::HostArray<bool>& actual) {
  ASSERT_EQ(expected.size(), actual.data().size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i], actual.data()[i]) << "at " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Comparisons.

struct Less {
  static constexpr std::string_view kName = "less";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::less(a, b);
  }
  template <class T>
  static bool ref(T a, T b) {
    return plain(a) < plain(b);
  }
};

struct Greater {
  static constexpr std::string_view kName = "greater";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::greater(a, b);
  }
  template <class T>
  static bool ref(T a, T b) {
    return plain(a) > plain(b);
  }
};

struct Equal {
  static constexpr std::string_view kName = "equal";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::equal(a, b);
  }
  template <class T>
  static bool ref(T a, T b) {
    return plain(a) == plain(b);
  }
};

struct BroadcastCase {
  Shape a;
  Shape b;
  Shape out;  // written out, so the test does not share the library's broadcasting rule
};

const std::vector<BroadcastCase>& compare_cases() {
  static const std::vector<BroadcastCase> cases{
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},                 // equal shapes
      {Shape{2, 3}, Shape{1, 3}, Shape{2, 3}},                 // size-1 dim on the right
      {Shape{3, 1}, Shape{3, 4}, Shape{3, 4}},                 // ... and on the left
      {Shape{3, 1}, Shape{1, 4}, Shape{3, 4}},                 // both sides at once
      {Shape{3}, Shape{2, 1, 3}, Shape{2, 1, 3}},              // rank mismatch
      {Shape{}, Shape{2, 3}, Shape{2, 3}},                     // scalar arrays
      {Shape{2, 3}, Shape{}, Shape{2, 3}},                     //
      {Shape{}, Shape{}, Shape{}},                             //
      {Shape{4, 1, 5}, Shape{1, 3, 1}, Shape{4, 3, 5}},        // alternating broadcast
      {Shape{2, 1, 4, 1}, Shape{3, 1, 5}, Shape{2, 3, 4, 5}},  // several dims and ranks
      {Shape{0, 3}, Shape{1, 3}, Shape{0, 3}},                 // 0 with 1 gives 0
      {Shape{2, 1}, Shape{2, 0}, Shape{2, 0}},                 //
      {Shape{37, 65}, Shape{65}, Shape{37, 65}},               // many inner runs
  };
  return cases;
}

template <class Op, class T>
void check_compare_arrays(const ferry::Device& dev, const BroadcastCase& c, unsigned seed) {
  SCOPED_TRACE(std::string(Op::kName) + " of " + c.a.to_string() + " and " + c.b.to_string());
  const std::vector<T> va = coarse_values<T>(count_of(c.a), seed);
  const std::vector<T> vb = coarse_values<T>(count_of(c.b), seed + 1);
  const auto y = Op::call(ferry::to_device(dev, va, c.a), ferry::to_device(dev, vb, c.b));
  static_assert(std::is_same_v<decltype(y), const DeviceArray<bool>>);
  EXPECT_EQ(y.dtype(), ferry::DType::boolean);
  ASSERT_EQ(y.shape(), c.out);
  std::vector<bool> expected;
  for (std::int64_t flat = 0; flat < c.out.numel(); ++flat) {
    const std::vector<std::int64_t> idx = ferry_test::unravel(flat, c.out);
    expected.push_back(
        Op::ref(va[static_cast<std::size_t>(ferry_test::broadcast_source(idx, c.a))],
                vb[static_cast<std::size_t>(ferry_test::broadcast_source(idx, c.b))]));
  }
  expect_mask(expected, y.to_host());
}

template <class T, class S>
T scalar_as(S s) {
  if constexpr (kHalf<T>) {
    return T(static_cast<float>(s));
  } else {
    return static_cast<T>(static_cast<Plain<S>>(s));
  }
}

template <class Op, class T, class S>
void check_compare_scalar(const ferry::Device& dev, S s) {
  SCOPED_TRACE(std::string(Op::kName) + " with the scalar " +
               std::to_string(plain(scalar_as<T>(s))));
  const Shape shape{6, 10};
  const std::vector<T> va = coarse_values<T>(60, 31);
  const auto a = ferry::to_device(dev, va, shape);
  const auto left = Op::call(a, s);
  const auto right = Op::call(s, a);
  static_assert(std::is_same_v<decltype(left), const DeviceArray<bool>>);
  static_assert(std::is_same_v<decltype(right), const DeviceArray<bool>>);
  EXPECT_EQ(left.shape(), shape);
  EXPECT_EQ(right.shape(), shape);
  const T st = scalar_as<T>(s);
  std::vector<bool> array_first;
  std::vector<bool> scalar_first;
  for (const T& x : va) {
    array_first.push_back(Op::ref(x, st));
    scalar_first.push_back(Op::ref(st, x));
  }
  // The scalar is one of the values, so every outcome occurs: the masks are not constant.
  ASSERT_NE(std::count(array_first.begin(), array_first.end(), true), 0);
  ASSERT_NE(std::count(array_first.begin(), array_first.end(), false), 0);
  const auto [hl, hr] = ferry::to_host(left, right);
  expect_mask(array_first, hl);
  expect_mask(scalar_first, hr);
}

template <class Op, class T>
void run_compare_suite() {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    unsigned seed = 3;
    for (const BroadcastCase& c : compare_cases()) {
      check_compare_arrays<Op, T>(dev, c, seed);
      seed += 2;
    }
    // The element type itself, each integer kind, and for floating arrays each floating kind.
    check_compare_scalar<Op, T>(dev, T(1));
    check_compare_scalar<Op, T>(dev, 1);
    if constexpr (std::is_unsigned_v<T>) {
      // Within the values uint8 holds (0..4 and 252..255), away from the ends, where every
      // comparison would come out the same.
      check_compare_scalar<Op, T>(dev, 253LL);
      check_compare_scalar<Op, T>(dev, 2U);
    } else {
      check_compare_scalar<Op, T>(dev, -1LL);
      check_compare_scalar<Op, T>(dev, 0U);
    }
    if constexpr (!kInt<T>) {
      check_compare_scalar<Op, T>(dev, 0.5);
      check_compare_scalar<Op, T>(dev, -1.5F);
      check_compare_scalar<Op, T>(dev, bfloat16(1.0F));
    }
    // An array compared with itself.
    const std::vector<T> v = coarse_values<T>(6, 77);
    const auto a = ferry::to_device(dev, v, Shape{6});
    const ferry::HostArray<bool> h = Op::call(a, a).to_host();
    for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(h.data()[i], Op::ref(v[i], v[i]));
  });
}

template <class T>
class CompareOps : public ::testing::Test {};
TYPED_TEST_SUITE(CompareOps, ferry_test::NumericTypes);

TYPED_TEST(CompareOps, LessMatchesReference) { run_compare_suite<Less, TypeParam>(); }
TYPED_TEST(CompareOps, GreaterMatchesReference) { run_compare_suite<Greater, TypeParam>(); }
TYPED_TEST(CompareOps, EqualMatchesReference) { run_compare_suite<Equal, TypeParam>(); }

template <class T>
class CompareFloating : public ::testing::Test {};
TYPED_TEST_SUITE(CompareFloating, ferry_test::FloatingTypes);

// NaN is unordered: every comparison with it is false, equal(NaN, NaN) included.
TYPED_TEST(CompareFloating, NaNComparesFalse) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const T n = std::numeric_limits<T>::quiet_NaN();
    const T inf = std::numeric_limits<T>::infinity();
    const T minus_inf = static_cast<T>(-plain(inf));
    const auto a = ferry::to_device(dev, {n, T(1.0F), n, T(2.0F), inf, minus_inf}, Shape{6});
    const auto b = ferry::to_device(dev, {T(1.0F), n, n, T(2.0F), inf, T(0.0F)}, Shape{6});
    const auto [lt, gt, eq] =
        ferry::to_host(ferry::less(a, b), ferry::greater(a, b), ferry::equal(a, b));
    expect_mask({false, false, false, false, false, true}, lt);
    expect_mask({false, false, false, false, false, false}, gt);
    expect_mask({false, false, false, true, true, false}, eq);  // inf == inf, NaN != NaN

    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<bool> none(6, false);
    expect_mask(none, ferry::less(a, nan).to_host());
    expect_mask(none, ferry::greater(nan, a).to_host());
    expect_mask(none, ferry::equal(a, nan).to_host());
    expect_mask(none, ferry::equal(nan, a).to_host());
    // A NaN is unequal to itself even when one array is both operands.
    const ferry::HostArray<bool> self = ferry::equal(a, a).to_host();
    EXPECT_FALSE(self.data()[0]);
    EXPECT_TRUE(self.data()[1]);
    EXPECT_FALSE(self.data()[2]);
  });
}

// int64 values beyond 2^53 differ by one; comparing through double would call them equal.
TEST(CompareInt64, ComparesExactlyBeyondDoublePrecision) {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const std::int64_t big = std::int64_t{1} << 53;
    const auto a = ferry::to_device(
        dev, {big + 1, big, -big - 1, std::numeric_limits<std::int64_t>::max()}, Shape{4});
    const auto b = ferry::to_device(
        dev, {big, big + 1, -big, std::numeric_limits<std::int64_t>::max() - 1}, Shape{4});
    const auto [lt, gt, eq] =
        ferry::to_host(ferry::less(a, b), ferry::greater(a, b), ferry::equal(a, b));
    expect_mask({false, true, true, false}, lt);
    expect_mask({true, false, false, true}, gt);
    expect_mask({false, false, false, false}, eq);
    expect_mask({false, true, false, false}, ferry::equal(a, big).to_host());
    expect_mask({false, false, true, false}, ferry::less(a, -big).to_host());
  });
}

// A scalar stands for an element of the array (ScalarFor): it is converted to the element type
// first, so a double compares as the float it rounds to.
TEST(CompareScalars, ScalarIsConvertedToTheElementTypeFirst) {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto a = ferry::to_device(dev, {0.1F, 0.2F}, Shape{2});
    expect_mask({true, false}, ferry::equal(a, 0.1).to_host());
    expect_mask({false, false}, ferry::less(a, 0.1).to_host());
    // An integer scalar on a floating array is an ordinary value.
    const auto h = ferry::to_device(dev, {bfloat16(2.0F), bfloat16(3.0F)}, Shape{2});
    expect_mask({false, true}, ferry::greater(h, 2).to_host());
  });
}

// ---------------------------------------------------------------------------------------------
// where.

using AllTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, bfloat16, bool,
                                  ferry::float16, std::int8_t, std::uint8_t, std::int16_t>;

template <class T>
bool same_value(T x, T y) {
  return is_nan(x) ? is_nan(y) : plain(x) == plain(y);
}

template <class T>
void expect_values_equal(const std::vector<T>& expected, std::span<const T> actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(same_value<T>(expected[i], actual[i]))
        << "at " << i << ": expected " << plain<T>(expected[i]) << ", got " << plain<T>(actual[i]);
  }
}

template <class T>
std::vector<T> values_of(std::size_t n, unsigned seed) {
  return ferry_test::random_values<T>(n, seed);
}

struct WhereCase {
  Shape mask;
  Shape a;
  Shape b;
  Shape out;
};

const std::vector<WhereCase>& where_cases() {
  static const std::vector<WhereCase> cases{
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},              // all equal
      {Shape{3, 1}, Shape{1, 4}, Shape{}, Shape{3, 4}},                  // three-way broadcast
      {Shape{}, Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},                  // a scalar mask
      {Shape{1, 4}, Shape{3, 1}, Shape{3, 4}, Shape{3, 4}},              // the mask broadcast
      {Shape{2, 3}, Shape{3}, Shape{2, 1}, Shape{2, 3}},                 // a and b broadcast
      {Shape{4, 1, 5}, Shape{1, 3, 1}, Shape{5}, Shape{4, 3, 5}},        // alternating
      {Shape{2, 1, 1}, Shape{1, 3, 1}, Shape{1, 1, 4}, Shape{2, 3, 4}},  // each along two dims
      {Shape{3}, Shape{2, 1, 3}, Shape{4, 1}, Shape{2, 4, 3}},           // three ranks
      {Shape{0, 3}, Shape{1, 3}, Shape{}, Shape{0, 3}},                  // 0 with 1 gives 0
      {Shape{2, 1}, Shape{2, 0}, Shape{1, 1}, Shape{2, 0}},              //
      {Shape{}, Shape{}, Shape{}, Shape{}},                              // all scalars
      {Shape{37, 65}, Shape{65}, Shape{37, 1}, Shape{37, 65}},           // many runs
  };
  return cases;
}

template <class T>
void check_where_arrays(const ferry::Device& dev, const WhereCase& c, unsigned seed) {
  SCOPED_TRACE("where(" + c.mask.to_string() + ", " + c.a.to_string() + ", " + c.b.to_string() +
               ")");
  const std::vector<bool> vm = ferry_test::random_values<bool>(count_of(c.mask), seed);
  const std::vector<T> va = values_of<T>(count_of(c.a), seed + 1);
  const std::vector<T> vb = values_of<T>(count_of(c.b), seed + 2);
  const auto mask = ferry::to_device(dev, vm, c.mask);
  const auto a = ferry::to_device(dev, va, c.a);
  const auto b = ferry::to_device(dev, vb, c.b);
  const auto y = ferry::where(mask, a, b);
  static_assert(std::is_same_v<decltype(y), const DeviceArray<T>>);
  ASSERT_EQ(y.shape(), c.out);
  std::vector<T> expected;
  for (std::int64_t flat = 0; flat < c.out.numel(); ++flat) {
    const std::vector<std::int64_t> idx = ferry_test::unravel(flat, c.out);
    const auto at = [&](const Shape& s) {
      return static_cast<std::size_t>(ferry_test::broadcast_source(idx, s));
    };
    expected.push_back(vm[at(c.mask)] ? va[at(c.a)] : vb[at(c.b)]);
  }
  const ferry::HostArray<T> h = y.to_host();
  expect_values_equal<T>(expected, h.data());
}

template <class T, class S>
void check_where_scalar(const ferry::Device& dev, const Shape& mask_shape, const Shape& array_shape,
                        const Shape& out, S s) {
  SCOPED_TRACE("where with a scalar, mask " + mask_shape.to_string() + ", array " +
               array_shape.to_string());
  const std::vector<bool> vm = ferry_test::random_values<bool>(count_of(mask_shape), 41);
  const std::vector<T> v = values_of<T>(count_of(array_shape), 42);
  const auto mask = ferry::to_device(dev, vm, mask_shape);
  const auto x = ferry::to_device(dev, v, array_shape);
  const auto array_scalar = ferry::where(mask, x, s);
  const auto scalar_array = ferry::where(mask, s, x);
  static_assert(std::is_same_v<decltype(array_scalar), const DeviceArray<T>>);
  static_assert(std::is_same_v<decltype(scalar_array), const DeviceArray<T>>);
  EXPECT_EQ(array_scalar.shape(), out);
  EXPECT_EQ(scalar_array.shape(), out);
  const T st = scalar_as<T>(s);
  std::vector<T> e1;
  std::vector<T> e2;
  for (std::int64_t flat = 0; flat < out.numel(); ++flat) {
    const std::vector<std::int64_t> idx = ferry_test::unravel(flat, out);
    const bool m = vm[static_cast<std::size_t>(ferry_test::broadcast_source(idx, mask_shape))];
    const T xv = v[static_cast<std::size_t>(ferry_test::broadcast_source(idx, array_shape))];
    e1.push_back(m ? xv : st);
    e2.push_back(m ? st : xv);
  }
  const auto [h1, h2] = ferry::to_host(array_scalar, scalar_array);
  expect_values_equal<T>(e1, h1.data());
  expect_values_equal<T>(e2, h2.data());
}

template <class T, class S>
void check_where_scalar_shapes(const ferry::Device& dev, S s) {
  check_where_scalar<T>(dev, Shape{3, 1}, Shape{1, 4}, Shape{3, 4}, s);
  check_where_scalar<T>(dev, Shape{2, 3}, Shape{}, Shape{2, 3}, s);  // the mask sets the shape
  check_where_scalar<T>(dev, Shape{}, Shape{2, 3}, Shape{2, 3}, s);
  check_where_scalar<T>(dev, Shape{0, 2}, Shape{1, 2}, Shape{0, 2}, s);
  check_where_scalar<T>(dev, Shape{40, 30}, Shape{40, 30}, Shape{40, 30}, s);
}

template <class T>
class CompareWhere : public ::testing::Test {};
TYPED_TEST_SUITE(CompareWhere, AllTypes);

TYPED_TEST(CompareWhere, ArraysMatchReference) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    unsigned seed = 5;
    for (const WhereCase& c : where_cases()) {
      check_where_arrays<T>(dev, c, seed);
      seed += 3;
    }
    // One array as both choices: the step reads one input twice, and the mask is moot.
    const std::vector<T> v = values_of<T>(8, 61);
    const auto x = ferry::to_device(dev, v, Shape{8});
    const std::vector<bool> vm = ferry_test::random_values<bool>(8, 62);
    const ferry::HostArray<T> h = ferry::where(ferry::to_device(dev, vm, Shape{8}), x, x).to_host();
    expect_values_equal<T>(v, h.data());
  });
}

TYPED_TEST(CompareWhere, ScalarFormsMatchReference) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    if constexpr (std::is_same_v<T, bool>) {
      check_where_scalar_shapes<T>(dev, true);
      check_where_scalar_shapes<T>(dev, false);
    } else {
      check_where_scalar_shapes<T>(dev, T(7));
      check_where_scalar_shapes<T>(dev, -3);  // an integer scalar works for every numeric type
      check_where_scalar_shapes<T>(dev, 5LL);
      if constexpr (!kInt<T>) {
        check_where_scalar_shapes<T>(dev, 0.5);
        check_where_scalar_shapes<T>(dev, bfloat16(-2.5F));
      }
    }
  });
}

// Masks made by comparisons feed where: relu and abs rebuilt from them.
class CompareWherePipeline : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(CompareWherePipeline);

TEST_P(CompareWherePipeline, MasksFromComparisonsSelect) {
  const std::vector<float> v = ferry_test::random_values<float>(50, 71);
  const auto x = ferry::to_device(dev, v, Shape{5, 10});
  const auto relu = ferry::where(ferry::greater(x, 0), x, 0);
  const auto abs = ferry::where(ferry::less(x, 0.0F), -x, x);
  const auto clipped =
      ferry::where(ferry::greater(x, 1.0), 1.0F, ferry::where(ferry::less(-1, x), x, -1));
  const auto [hr, ha, hc] = ferry::to_host(relu, abs, clipped);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(hr.data()[i], v[i] > 0 ? v[i] : 0.0F) << i;
    EXPECT_EQ(ha.data()[i], v[i] < 0 ? -v[i] : v[i]) << i;
    EXPECT_EQ(hc.data()[i], v[i] > 1 ? 1.0F : (v[i] > -1 ? v[i] : -1.0F)) << i;
  }
}

// A mask converts to numbers and back: true is 1 and false is 0, in every numeric type.
TEST_P(CompareWherePipeline, MaskAstypeRoundTrip) {
  const std::vector<std::int32_t> va = coarse_values<std::int32_t>(24, 81);
  const std::vector<std::int32_t> vb = coarse_values<std::int32_t>(6, 82);
  const auto mask =
      ferry::less(ferry::to_device(dev, va, Shape{4, 6}), ferry::to_device(dev, vb, Shape{6}));
  const auto f = mask.astype<float>();
  const auto i = mask.astype<std::int64_t>();
  const auto h16 = mask.astype<bfloat16>();
  const auto back = f.astype<bool>();
  const auto again = ferry::greater(f, 0.5F);
  const auto [hm, hf, hi, hh, hb, ha] = ferry::to_host(mask, f, i, h16, back, again);
  for (std::size_t k = 0; k < 24; ++k) {
    const bool expected = va[k] < vb[k % 6];
    EXPECT_EQ(hm.data()[k], expected) << k;
    EXPECT_EQ(hf.data()[k], expected ? 1.0F : 0.0F) << k;
    EXPECT_EQ(hi.data()[k], expected ? 1 : 0) << k;
    EXPECT_EQ(static_cast<float>(hh.data()[k]), expected ? 1.0F : 0.0F) << k;
    EXPECT_EQ(hb.data()[k], expected) << k;
    EXPECT_EQ(ha.data()[k], expected) << k;
  }
}

// ---------------------------------------------------------------------------------------------
// Errors, thrown at the call.

class CompareErrors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(CompareErrors);

std::string no_broadcast(std::string_view op, const Shape& a, const Shape& b) {
  return "[" + std::string(op) + "] shapes " + a.to_string() + " and " + b.to_string() +
         " do not broadcast";
}

TEST_P(CompareErrors, ShapesThatDoNotBroadcast) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 3});
  const auto b = ferry::zeros<float>(dev, Shape{4, 3});
  expect_error<ferry::ShapeError>([&] { return ferry::less(a, b); },
                                  "[less] shapes (2, 3) and (4, 3) do not broadcast");
  expect_error<ferry::ShapeError>([&] { return ferry::greater(b, a); },
                                  no_broadcast("greater", Shape{4, 3}, Shape{2, 3}));
  expect_error<ferry::ShapeError>([&] { return ferry::equal(a, b); },
                                  no_broadcast("equal", Shape{2, 3}, Shape{4, 3}));
  const auto zero = ferry::zeros<std::int32_t>(dev, Shape{0});
  const auto two = ferry::zeros<std::int32_t>(dev, Shape{2});
  expect_error<ferry::ShapeError>([&] { return ferry::equal(zero, two); },
                                  no_broadcast("equal", Shape{0}, Shape{2}));

  const auto m23 = ferry::zeros<bool>(dev, Shape{2, 3});
  const auto m43 = ferry::zeros<bool>(dev, Shape{4, 3});
  const auto c53 = ferry::zeros<float>(dev, Shape{5, 3});
  // The message names the three operands as given (a scalar as ()), whichever pair clashes.
  // a and b that do not broadcast with each other:
  expect_error<ferry::ShapeError>([&] { return ferry::where(m23, a, c53); },
                                  "[where] shapes (2, 3), (2, 3) and (5, 3) do not broadcast");
  // a mask that does not broadcast with a and b, though they agree:
  expect_error<ferry::ShapeError>([&] { return ferry::where(m43, a, a); },
                                  "[where] shapes (4, 3), (2, 3) and (2, 3) do not broadcast");
  expect_error<ferry::ShapeError>([&] { return ferry::where(m43, a, 1.0F); },
                                  "[where] shapes (4, 3), (2, 3) and () do not broadcast");
  expect_error<ferry::ShapeError>([&] { return ferry::where(m43, 1, a); },
                                  "[where] shapes (4, 3), () and (2, 3) do not broadcast");
  expect_error<ferry::ShapeError>(
      [&] { return ferry::where(ferry::zeros<bool>(dev, Shape{0}), two, 1); },
      "[where] shapes (0), (2) and () do not broadcast");
}

TEST_P(CompareErrors, ArraysOnTwoDevices) {
  const ferry::Device other = ferry_test::make_device(GetParam());
  const auto a = ferry::ones<double>(dev, Shape{3});
  const auto b = ferry::ones<double>(other, Shape{3});
  expect_error<ferry::DeviceMismatch>(
      [&] { return ferry::less(a, b); },
      "[less] arrays live on different devices: " + dev.name() + " and " + other.name());
  EXPECT_THROW((void)ferry::greater(b, a), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::equal(a, b), ferry::DeviceMismatch);

  const auto mask = ferry::ones<bool>(dev, Shape{3});
  expect_error<ferry::DeviceMismatch>(
      [&] { return ferry::where(mask, a, b); },
      "[where] arrays live on different devices: " + dev.name() + " and " + other.name());
  // The mask on one device, the values on another.
  expect_error<ferry::DeviceMismatch>(
      [&] { return ferry::where(mask, b, b); },
      "[where] arrays live on different devices: " + dev.name() + " and " + other.name());
  EXPECT_THROW((void)ferry::where(mask, b, 1.0), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::where(mask, 1.0, b), ferry::DeviceMismatch);
}

TEST_P(CompareErrors, EmptyHandles) {
  const DeviceArray<float> empty;
  const DeviceArray<bool> no_mask;
  const auto a = ferry::ones<float>(dev, Shape{2});
  const auto mask = ferry::ones<bool>(dev, Shape{2});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::less(empty, a); },
      "[less] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::where(no_mask, a, a); },
      "[where] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  EXPECT_THROW((void)ferry::greater(a, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::equal(empty, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::less(1.0, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::where(mask, empty, a), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::where(mask, a, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::where(mask, empty, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::where(mask, 0, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::where(no_mask, 0, a), ferry::InvalidArgument);
}

}  // namespace

}  // namespace test_compare
