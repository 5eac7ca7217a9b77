// Scalars and sugar: item() (an export of one element), numel() and ndim() (metadata), the
// comparison operators (the comparison ops under another name) and compound assignment
// (`w -= x` is `w = std::move(w) - x`, donating w's buffer).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

namespace test_sugar {

namespace {

using ferry_test::buffer_of;
using ferry_test::values_of;

using ferry::bfloat16;
using ferry::DeviceArray;
using ferry::Shape;
using ferry_test::expect_error;
using ferry_test::message_of;

// bfloat16 and float16 compare as the float they stand for.
template <class T>
std::vector<double> as_doubles(const DeviceArray<T>& a) {
  std::vector<double> out;
  for (const T& x : values_of(a)) {
    using Plain = std::conditional_t<ferry::HalfFloating<T>, float, T>;
    out.push_back(static_cast<double>(static_cast<Plain>(x)));
  }
  return out;
}

class Sugar : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(Sugar);

// ---------------------------------------------------------------------------------------------
// item(), numel(), ndim().

TEST_P(Sugar, ItemExportsTheOneElement) {
  EXPECT_EQ(ferry::to_device(dev, {2.5f}, Shape{}).item(), 2.5f);
  EXPECT_EQ(ferry::to_device(dev, {-7.0}, Shape{1, 1, 1}).item(), -7.0);  // any rank
  EXPECT_EQ(ferry::to_device(dev, {std::int64_t{1} << 40}, Shape{1}).item(), std::int64_t{1} << 40);
  EXPECT_EQ(ferry::to_device(dev, {3}, Shape{1}).item(), 3);
  EXPECT_EQ(static_cast<float>(ferry::to_device(dev, {bfloat16(0.5f)}, Shape{}).item()), 0.5f);
  const auto x = ferry::to_device(dev, {1.0f, 2.0f, 3.0f}, Shape{3});
  static_assert(std::is_same_v<decltype(ferry::sum(x).item()), float>);
  EXPECT_EQ(ferry::sum(x * 2.0f).item(), 12.0f);  // a pending result: item waits for it
  EXPECT_TRUE(ferry::any(x > 2.5f).item());
  EXPECT_FALSE(ferry::all(x > 2.5f).item());
}

TEST_P(Sugar, ItemOfAnotherSizeIsRefused) {
  const auto x = ferry::zeros<float>(dev, Shape{2, 3});
  expect_error<ferry::InvalidArgument>(
      [&] { return x.item(); }, "[item] needs an array of one element, not 6 (shape (2, 3))");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::zeros<std::int32_t>(dev, Shape{0}).item(); },
      "[item] needs an array of one element, not 0 (shape (0))");
  expect_error<ferry::InvalidArgument>(
      [] { return DeviceArray<float>{}.item(); },
      "[item] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  // A failed step reaches item as it reaches to_host.
  const auto q = ferry::to_device(dev, {4}, Shape{1}) / ferry::to_device(dev, {0}, Shape{1});
  expect_error<ferry::InvalidArgument>([&] { return q.item(); },
                                       "[divide] integer division by zero");
}

TEST_P(Sugar, NumelAndNdimAreMetadata) {
  const auto x = ferry::zeros<float>(dev, Shape{2, 3, 4});
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.ndim(), 3u);
  static_assert(std::is_same_v<decltype(x.numel()), std::int64_t>);
  static_assert(std::is_same_v<decltype(x.ndim()), std::size_t>);
  const auto s = ferry::sum(x);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.ndim(), 0u);
  const auto e = ferry::zeros<bool>(dev, Shape{0, 5});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.ndim(), 2u);
  const std::string why =
      " got an empty DeviceArray (default-constructed, moved from or deallocated)";
  expect_error<ferry::InvalidArgument>([] { return DeviceArray<float>{}.numel(); },
                                       "[numel]" + why);
  expect_error<ferry::InvalidArgument>([] { return DeviceArray<float>{}.ndim(); }, "[ndim]" + why);
}

TEST(SugarMetadata, NumelAndNdimNeverWait) {
  ferry::ManualExecutor ex;
  ferry::Device dev(ex);
  const auto y = ferry::exp(ferry::to_device(dev, {1.0f, 2.0f}, Shape{2, 1}));
  const std::size_t pending = ex.ready_count();
  EXPECT_EQ(y.numel(), 2);
  EXPECT_EQ(y.ndim(), 2u);
  EXPECT_FALSE(y.ready());
  EXPECT_EQ(ex.ready_count(), pending);  // nothing ran
}

// ---------------------------------------------------------------------------------------------
// Comparison operators: each against the op it stands for, in every call form.

template <class T>
class CompareOperators : public ::testing::Test {};
TYPED_TEST_SUITE(CompareOperators, ferry_test::NumericTypes);

template <class T>
void expect_same_mask(const DeviceArray<bool>& by_operator, const DeviceArray<bool>& by_op) {
  ASSERT_EQ(by_operator.shape(), by_op.shape());
  const auto [a, b] = ferry::to_host(by_operator, by_op);
  EXPECT_EQ(a, b);
}

TYPED_TEST(CompareOperators, EachIsItsOp) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    // Values from -2 to 2, so every comparison sees every outcome; b broadcasts along rows.
    const auto a = ferry::to_device(dev, {T(-2), T(-1), T(0), T(1), T(2), T(0)}, Shape{2, 3});
    const auto b = ferry::to_device(dev, {T(0), T(-1), T(2)}, Shape{3});
    static_assert(std::is_same_v<decltype(a < b), DeviceArray<bool>>);
    static_assert(std::is_same_v<decltype(a == 0), DeviceArray<bool>>);
    static_assert(std::is_same_v<decltype(1 != a), DeviceArray<bool>>);
    expect_same_mask<T>(a < b, ferry::less(a, b));
    expect_same_mask<T>(a <= b, ferry::less_equal(a, b));
    expect_same_mask<T>(a > b, ferry::greater(a, b));
    expect_same_mask<T>(a >= b, ferry::greater_equal(a, b));
    expect_same_mask<T>(a == b, ferry::equal(a, b));
    expect_same_mask<T>(a != b, ferry::not_equal(a, b));
    // With a scalar on either side.
    expect_same_mask<T>(a < 0, ferry::less(a, 0));
    expect_same_mask<T>(0 < a, ferry::less(0, a));
    expect_same_mask<T>(a <= 1, ferry::less_equal(a, 1));
    expect_same_mask<T>(1 <= a, ferry::less_equal(1, a));
    expect_same_mask<T>(a > 0, ferry::greater(a, 0));
    expect_same_mask<T>(0 > a, ferry::greater(0, a));
    expect_same_mask<T>(a >= T(1), ferry::greater_equal(a, T(1)));
    expect_same_mask<T>(T(1) >= a, ferry::greater_equal(T(1), a));
    expect_same_mask<T>(a == 0, ferry::equal(a, 0));
    expect_same_mask<T>(0 == a, ferry::equal(0, a));
    expect_same_mask<T>(a != 2, ferry::not_equal(a, 2));
    expect_same_mask<T>(2 != a, ferry::not_equal(2, a));
    // And the values themselves, written out (uint8 holds -2 and -1 as 254 and 255).
    constexpr bool kWraps = std::is_unsigned_v<T>;
    const ferry::HostArray<bool> gt = (a > 0).to_host();
    EXPECT_EQ(std::vector<bool>(gt.data().begin(), gt.data().end()),
              (std::vector<bool>{kWraps, kWraps, false, true, true, false}));
    const ferry::HostArray<bool> eq = (a == b).to_host();
    EXPECT_EQ(std::vector<bool>(eq.data().begin(), eq.data().end()),
              (std::vector<bool>{false, true, false, false, false, false}));
  });
}

TEST_P(Sugar, ComparisonOperatorsThrowAsTheirOps) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 3});
  const auto b = ferry::zeros<float>(dev, Shape{4});
  const std::string shapes = message_of<ferry::ShapeError>([&] { return ferry::less(a, b); });
  EXPECT_EQ(shapes.rfind("[less] ", 0), 0u) << shapes;
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { return a < b; }), shapes);
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { return a == b; }),
            message_of<ferry::ShapeError>([&] { return ferry::equal(a, b); }));
  const ferry::Device other = ferry_test::make_device(1);
  const auto c = ferry::zeros<float>(other, Shape{2, 3});
  EXPECT_EQ(message_of<ferry::DeviceMismatch>([&] { return a != c; }),
            message_of<ferry::DeviceMismatch>([&] { return ferry::not_equal(a, c); }));
  expect_error<ferry::InvalidArgument>(
      [&] { return DeviceArray<float>{} >= 1.0f; },
      "[greater_equal] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

TEST_P(Sugar, HandlesAndOtherTypesKeepTheirOwnEquality) {
  const auto a = ferry::zeros<float>(dev, Shape{2});
  const auto b = ferry::ones<float>(dev, Shape{2});
  // Device, Shape and HostArray compare as before: a bool, usable in gtest's macros.
  static_assert(std::is_same_v<decltype(a.device() == b.device()), bool>);
  static_assert(std::is_same_v<decltype(a.shape() != b.shape()), bool>);
  static_assert(std::is_same_v<decltype(a.to_host() == b.to_host()), bool>);
  EXPECT_EQ(a.device(), b.device());
  EXPECT_EQ(a.device(), dev);
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_NE(a.to_host(), b.to_host());
  EXPECT_TRUE(bfloat16(1.0f) == bfloat16(1.0f));
  EXPECT_TRUE(a.shape()[0] == 2);
  // Arrays compare elementwise: a mask, not a bool.
  static_assert(!std::is_convertible_v<decltype(a == b), bool>);
  EXPECT_FALSE(ferry::any(a == b).item());
}

TEST_P(Sugar, ComparisonsTraceAndHaveNoGradient) {
  using D = DeviceArray<double>;
  // Under jit: one program for every size, as with greater.
  auto positive = ferry::jit([](DeviceArray<float> x) { return ferry::where(x > 0.0f, x, 0.0f); });
  for (int n : {3, 5, 7}) {
    std::vector<float> v;
    for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(i - 2));
    const auto x = ferry::to_device(dev, v, Shape{n});
    EXPECT_EQ(values_of(positive(x)), values_of(ferry::relu(x)));
  }
  EXPECT_EQ(positive.cache_misses(), 1u);
  EXPECT_EQ(positive.cache_hits(), 2u);
  // A mask is a constant of the gradient: d/dv sum(v * (v > 0)) = (v > 0).
  const auto v = ferry::to_device(dev, {-1.0, 2.0, -3.0, 4.0}, Shape{4});
  const auto masked = [](const D& a) { return ferry::sum(a * (a > 0.0).astype<double>()); };
  EXPECT_EQ(values_of(ferry::grad(masked)(v)), (std::vector<double>{0, 1, 0, 1}));
}

// ---------------------------------------------------------------------------------------------
// Compound assignment.

template <class T>
class CompoundAssignment : public ::testing::Test {};
// The literals below pass 255: every numeric type but the 8-bit ones, whose wrapping is tested
// on the ops themselves (test_elementwise), which the compound forms call.
using WideTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, ferry::bfloat16,
                                   ferry::float16, std::int16_t>;
TYPED_TEST_SUITE(CompoundAssignment, WideTypes);

TYPED_TEST(CompoundAssignment, ValuesAsTheBinaryOps) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto x = ferry::to_device(dev, {T(1), T(2), T(4), T(8)}, Shape{2, 2});
    const auto row = ferry::to_device(dev, {T(2), T(4)}, Shape{2});
    auto w = ferry::to_device(dev, {T(8), T(16), T(32), T(64)}, Shape{2, 2});
    static_assert(std::is_same_v<decltype(w += x), DeviceArray<T>&>);
    w += x;  // 9 18 36 72
    EXPECT_EQ(as_doubles(w), (std::vector<double>{9, 18, 36, 72}));
    w -= 1;  // 8 17 35 71
    EXPECT_EQ(as_doubles(w), (std::vector<double>{8, 17, 35, 71}));
    w *= row;  // broadcast: 16 68 70 284
    EXPECT_EQ(as_doubles(w), (std::vector<double>{16, 68, 70, 284}));
    w /= T(2);  // 8 34 35 142
    EXPECT_EQ(as_doubles(w), (std::vector<double>{8, 34, 35, 142}));
    w -= x * T(2);  // 6 30 27 126
    EXPECT_EQ(as_doubles(w), (std::vector<double>{6, 30, 27, 126}));
    (w += 1) *= 2;  // chained: 14 62 56 254
    EXPECT_EQ(as_doubles(w), (std::vector<double>{14, 62, 56, 254}));
    EXPECT_EQ(as_doubles(x), (std::vector<double>{1, 2, 4, 8}));  // the right side is untouched
  });
}

TEST_P(Sugar, CompoundAssignmentDonatesTheOnlyReference) {
  auto w = ferry::to_device(dev, {1.0f, 2.0f, 3.0f, 4.0f}, Shape{4});
  const auto g = ferry::to_device(dev, {0.5f, 0.5f, 1.0f, 1.0f}, Shape{4});
  const float lr = 2.0f;
  const std::byte* before = buffer_of(w);
  const std::uint64_t donations = dev.stats().donations;
  w -= lr * g;  // as std::move(w) - lr * g: in place
  EXPECT_EQ(buffer_of(w), before);
  EXPECT_EQ(values_of(w), (std::vector<float>{0.0f, 1.0f, 1.0f, 2.0f}));
  EXPECT_EQ(dev.stats().donations, donations + 1);
  w += 1.0f;
  w *= g;
  w /= 0.5f;
  EXPECT_EQ(buffer_of(w), before);
  EXPECT_EQ(values_of(w), (std::vector<float>{1.0f, 2.0f, 4.0f, 6.0f}));
  EXPECT_EQ(dev.stats().donations, donations + 4);
  w += w;  // the one buffer on both sides
  EXPECT_EQ(values_of(w), (std::vector<float>{2.0f, 4.0f, 8.0f, 12.0f}));
  EXPECT_EQ(dev.stats().donations, donations + 5);
}

TEST_P(Sugar, AnAliasingCopyKeptPreventsTheDonation) {
  auto w = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  const std::byte* before = buffer_of(w);
  const auto kept = w;  // a second handle to w's buffer
  const std::uint64_t donations = dev.stats().donations;
  w -= 1.0f;
  EXPECT_NE(buffer_of(w), before);
  EXPECT_EQ(dev.stats().donations, donations);
  EXPECT_EQ(values_of(w), (std::vector<float>{0.0f, 1.0f}));
  EXPECT_EQ(values_of(kept), (std::vector<float>{1.0f, 2.0f}));  // still the old values
}

TEST_P(Sugar, CompoundAssignmentRebindsAsTheBinaryOpWould) {
  // Broadcasting may give w a larger shape, as w = w + x would.
  auto w = ferry::to_device(dev, {1.0f, 2.0f}, Shape{2});
  w += ferry::to_device(dev, {10.0f, 20.0f, 30.0f, 40.0f}, Shape{2, 2});
  EXPECT_EQ(w.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(w), (std::vector<float>{11.0f, 22.0f, 31.0f, 42.0f}));
  // An error is thrown as the op's, and w is left as it was.
  auto v = ferry::to_device(dev, {1.0f, 2.0f, 3.0f}, Shape{3});
  const auto bad = ferry::zeros<float>(dev, Shape{2});
  EXPECT_EQ(message_of<ferry::ShapeError>([&] { return v -= bad; }),
            message_of<ferry::ShapeError>([&] { return ferry::subtract(v, bad); }));
  ASSERT_TRUE(v.valid());
  EXPECT_EQ(values_of(v), (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

}  // namespace

}  // namespace test_sugar
