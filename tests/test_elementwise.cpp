// Elementwise ops: the binary ops (add, subtract, multiply, divide and their operators,
// maximum, minimum, pow) and the unary ones (neg and unary -, abs, relu, exp, log, sqrt,
// sigmoid, tanh, gelu), for every element type and call form, against plain reference loops
// written here; NumPy broadcasting edge cases; the integer and floating-point semantics that
// kernels/arith.hpp documents; and the errors, thrown at the call or by the export.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
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

namespace test_elementwise {

namespace {

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::bfloat16;
using ferry::DeviceArray;
using ferry::Shape;
using ferry_test::OnEachExecutor;

// ---------------------------------------------------------------------------------------------
// Reference machinery. Nothing here calls ferry's kernels: every expected value comes from a
// plain loop over the host copies of the inputs.

template <class T>
inline constexpr bool kInt = std::is_integral_v<T>;
// bfloat16 and float16: 16-bit floats computed in float.
template <class T>
inline constexpr bool kHalf = ferry::HalfFloating<T>;

// A 16-bit float prints and compares as the float it stands for; every other type as itself.
template <class T>
using Plain = std::conditional_t<kHalf<T>, float, T>;

template <class T>
double to_double(T x) {
  return static_cast<double>(static_cast<Plain<T>>(x));
}

template <class T>
bool is_nan(T x) {
  if constexpr (kInt<T>) {
    return false;
  } else {
    return std::isnan(to_double(x));
  }
}

template <class T>
T nan_of() {
  return std::numeric_limits<T>::quiet_NaN();
}

// Two's-complement arithmetic done in an unsigned type, where C++ defines wrap-around; the
// conversion back is modular in C++20. For the narrow types that type is unsigned int: their
// own unsigned type would be promoted to int, where 65535 * 65535 overflows.
template <class T>
using Unsigned = std::make_unsigned_t<T>;
template <class T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, Unsigned<T>>;

template <class T>
T wrap(Wide<T> u) {
  return static_cast<T>(u);
}

// x < 0, asked only of signed types (an unsigned one is never negative).
template <class T>
bool negative(T x) {
  if constexpr (std::is_signed_v<T>) {
    return x < 0;
  } else {
    static_cast<void>(x);
    return false;
  }
}

// A floating reference: bfloat16 and float16 compute in float and round once (the rule);
// float computes in double and rounds once, which for + - * / gives exactly the correctly
// rounded float result (double carries more than 2 * 24 + 2 bits); double is itself.
template <class T, class F>
T floating_ref(T a, T b, F f) {
  if constexpr (kHalf<T>) {
    return T(static_cast<float>(f(static_cast<float>(a), static_cast<float>(b))));
  } else {
    return static_cast<T>(f(static_cast<double>(a), static_cast<double>(b)));
  }
}

// Expects two values of T to be the same: equal, or both NaN.
template <class T>
void expect_same(T expected, T actual, std::size_t i) {
  if (is_nan(expected)) {
    EXPECT_TRUE(is_nan(actual)) << "at " << i << ": expected NaN, got "
                                << static_cast<Plain<T>>(actual);
  } else {
    EXPECT_EQ(static_cast<Plain<T>>(expected), static_cast<Plain<T>>(actual)) << "at " << i;
  }
}

// The conversion of a C++ scalar to the array's element type, for the scalars the tests use
// (all exactly representable in every element type they meet).
template <class T, class S>
T scalar_as(S s) {
  if constexpr (kHalf<T>) {
    return T(static_cast<float>(s));
  } else {
    return static_cast<T>(static_cast<Plain<S>>(s));
  }
}

template <class S>
const char* scalar_name() {
  if constexpr (std::is_same_v<S, int>) {
    return "int";
  } else if constexpr (std::is_same_v<S, long long>) {
    return "long long";
  } else if constexpr (std::is_same_v<S, unsigned>) {
    return "unsigned";
  } else if constexpr (std::is_same_v<S, float>) {
    return "float";
  } else if constexpr (std::is_same_v<S, double>) {
    return "double";
  } else {
    return "bfloat16";
  }
}

std::size_t count_of(const Shape& s) { return static_cast<std::size_t>(s.numel()); }

// ---------------------------------------------------------------------------------------------
// The binary ops. Each names the API, calls it, and gives a reference on one pair of elements
// (`ref`, exact) or, for pow on floating types, in double (`approx`, compared with tolerance).

struct RandomData {
  template <class T>
  static std::vector<T> lhs(std::size_t n, unsigned seed) {
    return ferry_test::random_values<T>(n, seed);
  }
  template <class T>
  static std::vector<T> rhs(std::size_t n, unsigned seed) {
    return ferry_test::random_values<T>(n, seed);
  }
  template <class T>
  static constexpr bool kApproximate = false;
  // Scalars for the array-scalar forms: each integer kind, then each floating kind.
  static auto int_scalars() { return std::tuple{3, -2LL, 7U}; }
  static auto float_scalars() { return std::tuple{0.5, -1.25F, bfloat16(1.5F)}; }
};

struct Add : RandomData {
  static constexpr std::string_view kName = "add";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::add(a, b);
  }
  template <class T>
  static T ref(T a, T b) {
    if constexpr (kInt<T>) {
      return wrap<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else {
      return floating_ref(a, b, [](auto x, auto y) { return x + y; });
    }
  }
};

struct Subtract : RandomData {
  static constexpr std::string_view kName = "subtract";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::subtract(a, b);
  }
  template <class T>
  static T ref(T a, T b) {
    if constexpr (kInt<T>) {
      return wrap<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
    } else {
      return floating_ref(a, b, [](auto x, auto y) { return x - y; });
    }
  }
};

struct Multiply : RandomData {
  static constexpr std::string_view kName = "multiply";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::multiply(a, b);
  }
  template <class T>
  static T ref(T a, T b) {
    if constexpr (kInt<T>) {
      return wrap<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else {
      return floating_ref(a, b, [](auto x, auto y) { return x * y; });
    }
  }
};

// Integer quotient by magnitudes: |a| / |b| truncates, the sign is applied after, all in the
// unsigned type, so INT_MIN / -1 comes out as INT_MIN without a special case.
template <class T>
T truncating_quotient(T a, T b) {
  using U = Wide<T>;
  const U ma = negative(a) ? U(0) - static_cast<U>(a) : static_cast<U>(a);
  const U mb = negative(b) ? U(0) - static_cast<U>(b) : static_cast<U>(b);
  const U q = ma / mb;
  return wrap<T>(negative(a) != negative(b) ? U(0) - q : q);
}

struct Divide : RandomData {
  static constexpr std::string_view kName = "divide";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::divide(a, b);
  }
  // Integer divisors must be nonzero here; division by zero has its own tests.
  template <class T>
  static std::vector<T> rhs(std::size_t n, unsigned seed) {
    std::vector<T> v = ferry_test::random_values<T>(n, seed);
    for (T& x : v) {
      if (to_double(x) == 0) x = T(5);
    }
    return v;
  }
  template <class T>
  static T ref(T a, T b) {
    if constexpr (kInt<T>) {
      return truncating_quotient(a, b);
    } else {
      return floating_ref(a, b, [](auto x, auto y) { return x / y; });
    }
  }
};

struct Maximum : RandomData {
  static constexpr std::string_view kName = "maximum";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::maximum(a, b);
  }
  template <class T>
  static T ref(T a, T b) {
    if (is_nan(a) || is_nan(b)) return nan_of<T>();
    return static_cast<Plain<T>>(a) >= static_cast<Plain<T>>(b) ? a : b;
  }
};

struct Minimum : RandomData {
  static constexpr std::string_view kName = "minimum";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::minimum(a, b);
  }
  template <class T>
  static T ref(T a, T b) {
    if (is_nan(a) || is_nan(b)) return nan_of<T>();
    return static_cast<Plain<T>>(a) <= static_cast<Plain<T>>(b) ? a : b;
  }
};

struct Pow : RandomData {
  static constexpr std::string_view kName = "pow";
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return ferry::pow(a, b);
  }
  // Floating bases are positive, so fractional exponents give real numbers.
  template <class T>
  static std::vector<T> lhs(std::size_t n, unsigned seed) {
    std::vector<T> v = ferry_test::random_values<T>(n, seed);
    if constexpr (!kInt<T>) {
      for (T& x : v) x = static_cast<T>(static_cast<float>(std::abs(to_double(x)) + 0.25));
    }
    return v;
  }
  // Integer exponents are 0..9: a negative one is an error, tested on its own.
  template <class T>
  static std::vector<T> rhs(std::size_t n, unsigned seed) {
    std::vector<T> v = ferry_test::random_values<T>(n, seed);
    if constexpr (kInt<T>) {
      for (T& x : v) x = negative(x) ? static_cast<T>(-x) : x;
    }
    return v;
  }
  template <class T>
  static constexpr bool kApproximate = !kInt<T>;
  static auto int_scalars() { return std::tuple{3, 2LL, 2U}; }
  static auto float_scalars() { return std::tuple{0.5, 1.25F, bfloat16(1.5F)}; }
  // Repeated multiplication, wrapping: independent of the kernel's squaring.
  template <class T>
  static T ref(T a, T b) {
    Wide<T> r = 1;
    for (T e = 0; e < b; ++e) r = static_cast<Wide<T>>(r * static_cast<Wide<T>>(a));
    return wrap<T>(r);
  }
  static double approx(double a, double b) { return std::pow(a, b); }
};

// The operators are the named functions under another spelling.
struct Plus : Add {
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return a + b;
  }
};
struct Minus : Subtract {
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return a - b;
  }
};
struct Times : Multiply {
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return a * b;
  }
};
struct Over : Divide {
  template <class L, class R>
  static auto call(const L& a, const R& b) {
    return a / b;
  }
};

// Compares `actual[i]` with Op applied to (as[i], bs[i]).
template <class Op, class T>
void expect_binary_results(const std::vector<T>& as, const std::vector<T>& bs,
                           std::span<const T> actual) {
  ASSERT_EQ(as.size(), actual.size());
  if constexpr (Op::template kApproximate<T>) {
    std::vector<double> expected;
    for (std::size_t i = 0; i < as.size(); ++i) {
      expected.push_back(Op::approx(to_double(as[i]), to_double(bs[i])));
    }
    ferry_test::expect_values<T>(expected, actual);
  } else {
    for (std::size_t i = 0; i < as.size(); ++i) {
      expect_same(Op::template ref<T>(as[i], bs[i]), actual[i], i);
    }
  }
}

struct BroadcastCase {
  Shape a;
  Shape b;
  Shape out;  // written out here rather than computed, so the test does not share the rule
};

const std::vector<BroadcastCase>& broadcast_cases() {
  static const std::vector<BroadcastCase> cases{
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},                    // equal shapes: the flat path
      {Shape{2, 3}, Shape{1, 3}, Shape{2, 3}},                    // size-1 dim on the right
      {Shape{2, 1}, Shape{2, 3}, Shape{2, 3}},                    // ... and on the left
      {Shape{3, 1}, Shape{1, 4}, Shape{3, 4}},                    // on both sides at once
      {Shape{2, 3, 4}, Shape{2, 1, 4}, Shape{2, 3, 4}},           // a middle dim only
      {Shape{3}, Shape{2, 1, 3}, Shape{2, 1, 3}},                 // rank mismatch
      {Shape{2, 4, 3}, Shape{3}, Shape{2, 4, 3}},                 // rank mismatch, other side
      {Shape{}, Shape{2, 3}, Shape{2, 3}},                        // scalar arrays
      {Shape{2, 3}, Shape{}, Shape{2, 3}},                        //
      {Shape{}, Shape{}, Shape{}},                                //
      {Shape{1, 1}, Shape{3, 4}, Shape{3, 4}},                    // all-ones shape
      {Shape{4, 1, 5}, Shape{1, 3, 1}, Shape{4, 3, 5}},           // alternating: nothing merges
      {Shape{2, 1, 4, 1}, Shape{3, 1, 5}, Shape{2, 3, 4, 5}},     // several dims and ranks
      {Shape{5, 1, 1, 3}, Shape{1, 4, 2, 1}, Shape{5, 4, 2, 3}},  // two dims broadcast together
      {Shape{2, 1, 3}, Shape{2, 4, 1}, Shape{2, 4, 3}},           //
      {Shape{0, 3}, Shape{1, 3}, Shape{0, 3}},                    // 0 with 1 gives 0
      {Shape{2, 1}, Shape{2, 0}, Shape{2, 0}},                    //
      {Shape{1, 0}, Shape{3, 1}, Shape{3, 0}},                    // 0 on one side, 3 on other
      {Shape{0}, Shape{}, Shape{0}},                              //
      {Shape{0}, Shape{0}, Shape{0}},                             //
      {Shape{37, 65}, Shape{65}, Shape{37, 65}},                  // many inner runs
      {Shape{300}, Shape{300}, Shape{300}},                       // a longer flat run
  };
  return cases;
}

template <class Op, class T>
void check_array_array(const ferry::Device& dev, const BroadcastCase& c, unsigned seed) {
  SCOPED_TRACE(std::string(Op::kName) + " of " + c.a.to_string() + " and " + c.b.to_string());
  const std::vector<T> va = Op::template lhs<T>(count_of(c.a), seed);
  const std::vector<T> vb = Op::template rhs<T>(count_of(c.b), seed + 1);
  const DeviceArray<T> a = ferry::to_device(dev, va, c.a);
  const DeviceArray<T> b = ferry::to_device(dev, vb, c.b);
  const auto y = Op::call(a, b);
  static_assert(std::is_same_v<decltype(y), const DeviceArray<T>>);
  ASSERT_EQ(y.shape(), c.out);  // known at the call, before anything ran
  std::vector<T> as;
  std::vector<T> bs;
  for (std::int64_t flat = 0; flat < c.out.numel(); ++flat) {
    const std::vector<std::int64_t> idx = ferry_test::unravel(flat, c.out);
    as.push_back(va[static_cast<std::size_t>(ferry_test::broadcast_source(idx, c.a))]);
    bs.push_back(vb[static_cast<std::size_t>(ferry_test::broadcast_source(idx, c.b))]);
  }
  const ferry::HostArray<T> h = y.to_host();
  EXPECT_EQ(h.shape(), c.out);
  expect_binary_results<Op, T>(as, bs, h.data());
}

// One array given as both operands: the step reads one input twice.
template <class Op, class T>
void check_same_array_twice(const ferry::Device& dev) {
  const std::vector<T> v = Op::template rhs<T>(12, 99);
  const DeviceArray<T> a = ferry::to_device(dev, v, Shape{3, 4});
  const ferry::HostArray<T> h = Op::call(a, a).to_host();
  expect_binary_results<Op, T>(v, v, h.data());
  // The operands are immutable: reading a again gives what was imported.
  const ferry::HostArray<T> again = a.to_host();
  EXPECT_TRUE(std::equal(v.begin(), v.end(), again.data().begin(), [](T x, T y) {
    return is_nan(x) ? is_nan(y) : to_double(x) == to_double(y);
  }));
}

template <class Op, class T, class S>
void check_scalar_forms(const ferry::Device& dev, S s, const Shape& shape) {
  SCOPED_TRACE(std::string(Op::kName) + " with a scalar of type " + scalar_name<S>() +
               " and an array of " + shape.to_string());
  const T st = scalar_as<T>(s);
  const std::size_t n = count_of(shape);
  const std::vector<T> va = Op::template lhs<T>(n, 11);
  const std::vector<T> vb = Op::template rhs<T>(n, 12);
  const DeviceArray<T> a = ferry::to_device(dev, va, shape);
  const DeviceArray<T> b = ferry::to_device(dev, vb, shape);
  const auto array_scalar = Op::call(a, s);
  const auto scalar_array = Op::call(s, b);
  static_assert(std::is_same_v<decltype(array_scalar), const DeviceArray<T>>);
  static_assert(std::is_same_v<decltype(scalar_array), const DeviceArray<T>>);
  EXPECT_EQ(array_scalar.shape(), shape);
  EXPECT_EQ(scalar_array.shape(), shape);
  const ferry::HostArray<T> h1 = array_scalar.to_host();
  const ferry::HostArray<T> h2 = scalar_array.to_host();
  {
    SCOPED_TRACE("array op scalar");
    expect_binary_results<Op, T>(va, std::vector<T>(n, st), h1.data());
  }
  {
    SCOPED_TRACE("scalar op array");
    expect_binary_results<Op, T>(std::vector<T>(n, st), vb, h2.data());
  }
}

template <class Op, class T>
void run_binary_suite() {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    unsigned seed = 1;
    for (const BroadcastCase& c : broadcast_cases()) {
      check_array_array<Op, T>(dev, c, seed);
      seed += 2;
    }
    check_same_array_twice<Op, T>(dev);
    for (const Shape& shape : {Shape{2, 3, 4}, Shape{}, Shape{0, 3}}) {
      std::apply([&](auto... s) { (check_scalar_forms<Op, T>(dev, s, shape), ...); },
                 Op::int_scalars());
      if constexpr (!kInt<T>) {
        std::apply([&](auto... s) { (check_scalar_forms<Op, T>(dev, s, shape), ...); },
                   Op::float_scalars());
      }
    }
  });
}

template <class T>
class ElementwiseBinary : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseBinary, ferry_test::NumericTypes);

TYPED_TEST(ElementwiseBinary, AddMatchesReference) { run_binary_suite<Add, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, SubtractMatchesReference) { run_binary_suite<Subtract, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, MultiplyMatchesReference) { run_binary_suite<Multiply, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, DivideMatchesReference) { run_binary_suite<Divide, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, MaximumMatchesReference) { run_binary_suite<Maximum, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, MinimumMatchesReference) { run_binary_suite<Minimum, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, PowMatchesReference) { run_binary_suite<Pow, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, OperatorPlusMatchesReference) { run_binary_suite<Plus, TypeParam>(); }
TYPED_TEST(ElementwiseBinary, OperatorMinusMatchesReference) {
  run_binary_suite<Minus, TypeParam>();
}
TYPED_TEST(ElementwiseBinary, OperatorTimesMatchesReference) {
  run_binary_suite<Times, TypeParam>();
}
TYPED_TEST(ElementwiseBinary, OperatorDivideMatchesReference) {
  run_binary_suite<Over, TypeParam>();
}

// ---------------------------------------------------------------------------------------------
// The unary ops. Exact ones give `ref`; transcendental ones give `approx` in double, and, where
// the op is a single libm call, `in_float`, against which bfloat16 and float16 results are
// exact.

struct Neg {
  static constexpr std::string_view kName = "neg";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::neg(a);
  }
  template <class T>
  static T ref(T x) {
    if constexpr (kInt<T>) {
      return wrap<T>(Wide<T>(0) - static_cast<Wide<T>>(x));
    } else {
      return static_cast<T>(-static_cast<Plain<T>>(x));
    }
  }
};

struct UnaryMinus : Neg {
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return -a;
  }
};

struct Abs {
  static constexpr std::string_view kName = "abs";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::abs(a);
  }
  template <class T>
  static T ref(T x) {
    if constexpr (kInt<T>) {  // the magnitude, wrapped: abs(min) is min
      return negative(x) ? wrap<T>(Wide<T>(0) - static_cast<Wide<T>>(x)) : x;
    } else {
      return to_double(x) < 0 ? static_cast<T>(-static_cast<Plain<T>>(x)) : x;
    }
  }
};

struct Relu {
  static constexpr std::string_view kName = "relu";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::relu(a);
  }
  template <class T>
  static T ref(T x) {
    if (is_nan(x)) return x;  // documented: relu propagates NaN
    return to_double(x) > 0 ? x : T(0);
  }
};

struct AnyInput {
  template <class T>
  static std::vector<T> data(std::size_t n, unsigned seed) {
    return ferry_test::random_values<T>(n, seed);
  }
};

// log and sqrt get positive inputs; their special values are tested on their own.
struct PositiveInput {
  template <class T>
  static std::vector<T> data(std::size_t n, unsigned seed) {
    std::vector<T> v = ferry_test::random_values<T>(n, seed);
    for (T& x : v) x = static_cast<T>(static_cast<float>(std::abs(to_double(x)) + 0.0625));
    return v;
  }
};

struct Exp : AnyInput {
  static constexpr std::string_view kName = "exp";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::exp(a);
  }
  static double approx(double x) { return std::exp(x); }
  static float in_float(float x) { return std::exp(x); }
};

struct Log : PositiveInput {
  static constexpr std::string_view kName = "log";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::log(a);
  }
  static double approx(double x) { return std::log(x); }
  static float in_float(float x) { return std::log(x); }
};

struct Sqrt : PositiveInput {
  static constexpr std::string_view kName = "sqrt";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::sqrt(a);
  }
  static double approx(double x) { return std::sqrt(x); }
  static float in_float(float x) { return std::sqrt(x); }
};

struct Tanh : AnyInput {
  static constexpr std::string_view kName = "tanh";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::tanh(a);
  }
  static double approx(double x) { return std::tanh(x); }
  static float in_float(float x) { return std::tanh(x); }
};

struct Sigmoid : AnyInput {
  static constexpr std::string_view kName = "sigmoid";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::sigmoid(a);
  }
  static double approx(double x) { return 1.0 / (1.0 + std::exp(-x)); }
};

// GELU through erfc rather than erf: another formula for the same function.
struct Gelu : AnyInput {
  static constexpr std::string_view kName = "gelu";
  template <class T>
  static auto call(const DeviceArray<T>& a) {
    return ferry::gelu(a);
  }
  static double approx(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
};

template <class Op, class T>
void expect_unary_results(const std::vector<T>& xs, std::span<const T> actual) {
  ASSERT_EQ(xs.size(), actual.size());
  if constexpr (requires { Op::approx(0.0); }) {
    if constexpr (kHalf<T> && requires { Op::in_float(0.0F); }) {
      // Computed in float, rounded once: exact against the same float function.
      for (std::size_t i = 0; i < xs.size(); ++i) {
        expect_same(T(Op::in_float(static_cast<float>(xs[i]))), actual[i], i);
      }
    } else {
      std::vector<double> expected;
      for (const T& x : xs) expected.push_back(Op::approx(to_double(x)));
      ferry_test::expect_values<T>(expected, actual);
    }
  } else {
    for (std::size_t i = 0; i < xs.size(); ++i)
      expect_same(Op::template ref<T>(xs[i]), actual[i], i);
  }
}

template <class Op, class T>
void check_unary(const ferry::Device& dev, const Shape& shape, const std::vector<T>& xs) {
  SCOPED_TRACE(std::string(Op::kName) + " of " + shape.to_string());
  const DeviceArray<T> a = ferry::to_device(dev, xs, shape);
  const auto y = Op::call(a);
  static_assert(std::is_same_v<decltype(y), const DeviceArray<T>>);
  ASSERT_EQ(y.shape(), shape);
  const ferry::HostArray<T> h = y.to_host();
  expect_unary_results<Op, T>(xs, h.data());
}

// The extremes of T: wrap-around for integers, infinities, NaN and signed zero for floats.
template <class T>
std::vector<T> extreme_values() {
  using L = std::numeric_limits<T>;
  if constexpr (kInt<T>) {
    return {L::min(), static_cast<T>(L::min() + 1), T(-1), T(0), T(1), L::max()};
  } else {
    const Plain<T> inf = L::infinity();
    return {L::lowest(), T(-1.5F), T(-0.0F), T(0),    T(2.5F),
            L::max(),    L::min(), T(inf),   T(-inf), L::quiet_NaN()};
  }
}

template <class Op, class T>
void run_exact_unary_suite() {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    check_unary<Op, T>(dev, Shape{2, 3, 4}, ferry_test::random_values<T>(24, 5));
    check_unary<Op, T>(dev, Shape{}, {T(-3)});
    check_unary<Op, T>(dev, Shape{0, 5}, {});
    check_unary<Op, T>(dev, Shape{1000}, ferry_test::random_values<T>(1000, 6));
    const std::vector<T> extremes = extreme_values<T>();
    check_unary<Op, T>(dev, Shape{static_cast<std::int64_t>(extremes.size())}, extremes);
  });
}

template <class Op, class T>
void run_transcendental_suite() {
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    check_unary<Op, T>(dev, Shape{2, 3, 4}, Op::template data<T>(24, 7));
    check_unary<Op, T>(dev, Shape{}, Op::template data<T>(1, 8));
    check_unary<Op, T>(dev, Shape{3, 0}, {});
    check_unary<Op, T>(dev, Shape{1000}, Op::template data<T>(1000, 9));
  });
}

template <class T>
class ElementwiseUnary : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseUnary, ferry_test::NumericTypes);

TYPED_TEST(ElementwiseUnary, NegMatchesReference) { run_exact_unary_suite<Neg, TypeParam>(); }
TYPED_TEST(ElementwiseUnary, UnaryMinusMatchesReference) {
  run_exact_unary_suite<UnaryMinus, TypeParam>();
}
TYPED_TEST(ElementwiseUnary, AbsMatchesReference) { run_exact_unary_suite<Abs, TypeParam>(); }
TYPED_TEST(ElementwiseUnary, ReluMatchesReference) { run_exact_unary_suite<Relu, TypeParam>(); }

template <class T>
class ElementwiseTranscendental : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseTranscendental, ferry_test::FloatingTypes);

TYPED_TEST(ElementwiseTranscendental, ExpMatchesReference) {
  run_transcendental_suite<Exp, TypeParam>();
}
TYPED_TEST(ElementwiseTranscendental, LogMatchesReference) {
  run_transcendental_suite<Log, TypeParam>();
}
TYPED_TEST(ElementwiseTranscendental, SqrtMatchesReference) {
  run_transcendental_suite<Sqrt, TypeParam>();
}
TYPED_TEST(ElementwiseTranscendental, TanhMatchesReference) {
  run_transcendental_suite<Tanh, TypeParam>();
}
TYPED_TEST(ElementwiseTranscendental, SigmoidMatchesReference) {
  run_transcendental_suite<Sigmoid, TypeParam>();
}
TYPED_TEST(ElementwiseTranscendental, GeluMatchesReference) {
  run_transcendental_suite<Gelu, TypeParam>();
}

// Special inputs, with the values IEEE functions give there (written out, in double).
template <class Op, class T>
void check_special(const ferry::Device& dev, const std::vector<double>& in,
                   const std::vector<double>& expected) {
  SCOPED_TRACE(std::string(Op::kName) + " at special values");
  std::vector<T> xs;
  for (double x : in) xs.push_back(static_cast<T>(static_cast<float>(x)));
  const auto y = Op::call(ferry::to_device(dev, xs, Shape{static_cast<std::int64_t>(xs.size())}));
  const ferry::HostArray<T> h = y.to_host();
  ferry_test::expect_values<T>(expected, h.data());
}

TYPED_TEST(ElementwiseTranscendental, SpecialValues) {
  using T = TypeParam;
  constexpr double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> in{-inf, -1000, -1, -0.0, 0, 0.5, 1, 1000, inf, nan};
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    check_special<Exp, T>(
        dev, in,
        {0, 0, 0.36787944117144233, 1, 1, 1.6487212707001282, 2.718281828459045, inf, inf, nan});
    check_special<Log, T>(
        dev, in, {nan, nan, nan, -inf, -inf, -0.6931471805599453, 0, 6.907755278982137, inf, nan});
    check_special<Sqrt, T>(
        dev, in, {nan, nan, nan, 0, 0, 0.7071067811865476, 1, 31.622776601683793, inf, nan});
    check_special<Tanh, T>(
        dev, in,
        {-1, -1, -0.7615941559557649, 0, 0, 0.46211715726000974, 0.7615941559557649, 1, 1, nan});
    check_special<Sigmoid, T>(
        dev, in,
        {0, 0, 0.2689414213699951, 0.5, 0.5, 0.6224593312018546, 0.7310585786300049, 1, 1, nan});
    // gelu(-inf) is its limit 0, not the NaN of -inf * 0 that the formula alone would give.
    check_special<Gelu, T>(
        dev, {-inf, -1000, -1, -0.0, 0, 0.5, 1, 1000, inf, nan},
        {0, 0, -0.15865525393145707, 0, 0, 0.34573123063700656, 0.8413447460685429, 1000, inf,
         nan});
  });
}

// The naive 1 / (1 + e^-x) is fine at -1000 but e^x / (1 + e^x) is inf / inf at +1000; a
// stable sigmoid is exactly 1 and 0 there, never NaN.
TYPED_TEST(ElementwiseTranscendental, SigmoidIsStableForLargeMagnitudes) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto x =
        ferry::to_device(dev, {T(1000.0F), T(-1000.0F), T(100.0F), T(-100.0F)}, Shape{4});
    const ferry::HostArray<T> h = ferry::sigmoid(x).to_host();
    EXPECT_EQ(static_cast<double>(static_cast<Plain<T>>(h(0))), 1.0);
    EXPECT_EQ(static_cast<double>(static_cast<Plain<T>>(h(1))), 0.0);
    EXPECT_EQ(static_cast<double>(static_cast<Plain<T>>(h(2))), 1.0);
    // e^-100 is 3.7e-44: representable as a (subnormal) float, so neither NaN nor negative.
    const double small = to_double(h(3));
    EXPECT_FALSE(std::isnan(small));
    EXPECT_GE(small, 0.0);
    EXPECT_LT(small, 1e-40);
  });
}

// ---------------------------------------------------------------------------------------------
// Integer semantics (kernels/arith.hpp): wrap-around, truncating division, and the two errors
// only a kernel can see.

template <class T>
class ElementwiseIntegerSemantics : public ::testing::Test {};
using IntTypes = ::testing::Types<std::int32_t, std::int64_t, std::int8_t, std::int16_t>;
TYPED_TEST_SUITE(ElementwiseIntegerSemantics, IntTypes);

TYPED_TEST(ElementwiseIntegerSemantics, ArithmeticWrapsInTwosComplement) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto a = ferry::to_device(dev, {L::max(), L::min(), L::min(), T(-1)}, Shape{4});
    const auto b = ferry::to_device(dev, {T(1), T(1), T(-1), L::min()}, Shape{4});
    const auto [sum, diff, prod, quot, negated, absolute] =
        ferry::to_host(a + b, a - b, a * b, a / b, -a, ferry::abs(a));
    EXPECT_EQ(sum.data()[0], L::min());  // max + 1
    EXPECT_EQ(sum.data()[1], L::min() + 1);
    EXPECT_EQ(sum.data()[2], L::max());  // min + -1
    EXPECT_EQ(sum.data()[3], L::max());  // -1 + min
    EXPECT_EQ(diff.data()[0], L::max() - 1);
    EXPECT_EQ(diff.data()[1], L::max());      // min - 1
    EXPECT_EQ(diff.data()[2], L::min() + 1);  // min - -1
    EXPECT_EQ(diff.data()[3], L::max());      // -1 - min
    EXPECT_EQ(prod.data()[0], L::max());
    EXPECT_EQ(prod.data()[1], L::min());
    EXPECT_EQ(prod.data()[2], L::min());  // min * -1
    EXPECT_EQ(prod.data()[3], L::min());  // -1 * min
    EXPECT_EQ(quot.data()[0], L::max());
    EXPECT_EQ(quot.data()[1], L::min());
    EXPECT_EQ(quot.data()[2], L::min());  // min / -1: the one quotient that overflows
    EXPECT_EQ(quot.data()[3], T(0));      // -1 / min
    EXPECT_EQ(negated.data()[0], L::min() + 1);
    EXPECT_EQ(negated.data()[1], L::min());  // -min is min
    EXPECT_EQ(negated.data()[3], T(1));
    EXPECT_EQ(absolute.data()[0], L::max());
    EXPECT_EQ(absolute.data()[1], L::min());  // abs(min) is min
    EXPECT_EQ(absolute.data()[3], T(1));

    // The scalar forms wrap the same way, and so does the scalar's own conversion to T.
    const auto [twice, min_over_neg1, from_max, shifted] =
        ferry::to_host(a * 2, a / -1, L::max() - b, a + (static_cast<long long>(1) << 40));
    EXPECT_EQ(twice.data()[0], T(-2));  // max * 2
    EXPECT_EQ(twice.data()[1], T(0));   // min * 2
    EXPECT_EQ(min_over_neg1.data()[1], L::min());
    EXPECT_EQ(min_over_neg1.data()[0], -L::max());
    EXPECT_EQ(from_max.data()[3], T(-1));  // max - min
    // 2^40 wraps to 0 in int32 (C++20 modular conversion); int64 keeps it.
    const T shift = std::is_same_v<T, std::int32_t> ? T(0) : static_cast<T>(1LL << 40);
    EXPECT_EQ(shifted.data()[3], static_cast<T>(T(-1) + shift));
  });
}

TYPED_TEST(ElementwiseIntegerSemantics, DivisionTruncatesTowardZero) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto a =
        ferry::to_device(dev, {T(7), T(-7), T(7), T(-7), T(0), T(9), T(-9), T(1)}, Shape{8});
    const auto b =
        ferry::to_device(dev, {T(2), T(2), T(-2), T(-2), T(5), T(10), T(10), T(-1)}, Shape{8});
    const ferry::HostArray<T> q = (a / b).to_host();
    const std::vector<T> expected{3, -3, -3, 3, 0, 0, 0, -1};
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), q.data().begin()));
    // Both scalar forms truncate too.
    const auto [by_two, into_nine] = ferry::to_host(a / 2, 9 / b);
    const std::vector<T> halves{3, -3, 3, -3, 0, 4, -4, 0};
    const std::vector<T> nines{4, 4, -4, -4, 1, 0, 0, -9};
    EXPECT_TRUE(std::equal(halves.begin(), halves.end(), by_two.data().begin()));
    EXPECT_TRUE(std::equal(nines.begin(), nines.end(), into_nine.data().begin()));
  });
}

// Only the kernel sees a zero divisor, so the call returns and the export that needs the value
// throws; every array depending on it inherits the error.
TYPED_TEST(ElementwiseIntegerSemantics, DivisionByZeroThrowsAtTheExport) {
  using T = TypeParam;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto a = ferry::to_device(dev, {T(1), T(2), T(3)}, Shape{3});
    const auto z = ferry::to_device(dev, {T(1), T(0), T(1)}, Shape{3});
    DeviceArray<T> q;
    ASSERT_NO_THROW(q = a / z);
    expect_error<ferry::InvalidArgument>([&] { return q.to_host(); },
                                         "[divide] integer division by zero");
    EXPECT_THROW(ferry::wait(q), ferry::InvalidArgument);
    DeviceArray<T> later;
    ASSERT_NO_THROW(later = ferry::relu(q + 1));
    expect_error<ferry::InvalidArgument>([&] { return later.to_host(); },
                                         "[divide] integer division by zero");
    // Every form: array / scalar zero, scalar / array, and a broadcast divisor.
    EXPECT_THROW((void)(a / 0).to_host(), ferry::InvalidArgument);
    EXPECT_THROW((void)ferry::divide(a, 0LL).to_host(), ferry::InvalidArgument);
    EXPECT_THROW((void)(6 / z).to_host(), ferry::InvalidArgument);
    const auto grid = ferry::to_device(dev, std::vector<T>(6, T(4)), Shape{2, 3});
    EXPECT_THROW((void)(grid / z).to_host(), ferry::InvalidArgument);
    EXPECT_THROW((void)ferry::divide(z, z).to_host(), ferry::InvalidArgument);
    // The failure is confined to the arrays that depend on it.
    const ferry::HostArray<T> fine = (a / 1 + z).to_host();
    EXPECT_EQ(fine.data()[1], T(2));
    // With nothing to divide there is no division by zero.
    const auto none = ferry::to_device(dev, std::vector<T>{}, Shape{0});
    EXPECT_EQ((none / 0).to_host().shape(), Shape{0});
  });
}

TYPED_TEST(ElementwiseIntegerSemantics, PowWrapsAndRejectsNegativeExponentsAtTheExport) {
  using T = TypeParam;
  using U = Unsigned<T>;
  ferry_test::for_each_executor([](const ferry::Device& dev) {
    const auto base =
        ferry::to_device(dev, {T(2), T(2), T(2), T(3), T(-1), T(0), T(0), T(-2), T(7)}, Shape{9});
    const int bits = std::numeric_limits<U>::digits;
    const auto exps = ferry::to_device(
        dev, {T(bits - 1), T(bits), T(0), T(40), T(7), T(0), T(5), T(3), T(1)}, Shape{9});
    const ferry::HostArray<T> p = ferry::pow(base, exps).to_host();
    EXPECT_EQ(p.data()[0], std::numeric_limits<T>::min());  // 2^(bits-1) wraps to min
    EXPECT_EQ(p.data()[1], T(0));                           // 2^bits wraps to 0
    EXPECT_EQ(p.data()[2], T(1));
    U three = 1;
    for (int i = 0; i < 40; ++i) three = static_cast<U>(three * 3U);
    EXPECT_EQ(p.data()[3], static_cast<T>(three));  // 3^40 overflows both widths
    EXPECT_EQ(p.data()[4], T(-1));
    EXPECT_EQ(p.data()[5], T(1));  // 0^0 is 1
    EXPECT_EQ(p.data()[6], T(0));
    EXPECT_EQ(p.data()[7], T(-8));
    EXPECT_EQ(p.data()[8], T(7));

    const auto negs = ferry::to_device(dev, {T(2), T(-1), T(3)}, Shape{3});
    DeviceArray<T> bad;
    ASSERT_NO_THROW(bad =
                        ferry::pow(base, ferry::to_device(dev, {T(1), T(-1), T(1)}, Shape{3, 1})));
    expect_error<ferry::InvalidArgument>([&] { return bad.to_host(); },
                                         "[pow] negative integer exponent -1");
    EXPECT_THROW((void)ferry::pow(negs, -2).to_host(), ferry::InvalidArgument);
    EXPECT_THROW((void)ferry::pow(2, negs).to_host(), ferry::InvalidArgument);
    EXPECT_THROW((void)ferry::pow(negs, negs).to_host(), ferry::InvalidArgument);
  });
}

// uint8 wraps modulo 256 (NumPy's and PyTorch's uint8): 0 - 1 is 255, the negation of 1 is
// 255, abs is the identity, and a division has no sign to truncate toward.
class ElementwiseUint8 : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ElementwiseUint8);

TEST_P(ElementwiseUint8, ArithmeticWrapsModulo256) {
  using U8 = std::uint8_t;
  const auto a = ferry::to_device(dev, std::vector<U8>{0, 1, 200, 255}, Shape{4});
  const auto b = ferry::to_device(dev, std::vector<U8>{1, 255, 100, 2}, Shape{4});
  const auto [sum, diff, prod, quot, negated, absolute, signs, power] = ferry::to_host(
      a + b, a - b, a * b, a / b, -a, ferry::abs(a), ferry::sign(a), ferry::pow(a, b));
  const auto values = [](const ferry::HostArray<U8>& h) {
    return std::vector<int>(h.data().begin(), h.data().end());
  };
  EXPECT_EQ(values(sum), (std::vector<int>{1, 0, 44, 1}));
  EXPECT_EQ(values(diff), (std::vector<int>{255, 2, 100, 253}));
  EXPECT_EQ(values(prod), (std::vector<int>{0, 255, 32, 254}));  // 20000 % 256 == 32
  EXPECT_EQ(values(quot), (std::vector<int>{0, 0, 2, 127}));
  EXPECT_EQ(values(negated), (std::vector<int>{0, 255, 56, 1}));
  EXPECT_EQ(values(absolute), (std::vector<int>{0, 1, 200, 255}));
  EXPECT_EQ(values(signs), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(values(power), (std::vector<int>{0, 1, 0, 1}));  // 200^100 and 255^2 mod 256
  // A negative scalar converts modulo 256 too, as any integer scalar does: a + -1 is a + 255.
  EXPECT_EQ(values((a + -1).to_host()), (std::vector<int>{255, 0, 199, 254}));
  EXPECT_EQ(values((a > 100).astype<U8>().to_host()), (std::vector<int>{0, 0, 1, 1}));
  expect_error<ferry::InvalidArgument>([&] { return (a / 0).to_host(); },
                                       "[divide] integer division by zero");
}

// ---------------------------------------------------------------------------------------------
// Floating-point semantics.

template <class T>
class ElementwiseFloatingSemantics : public ::testing::Test {};
TYPED_TEST_SUITE(ElementwiseFloatingSemantics, ferry_test::FloatingTypes);

TYPED_TEST(ElementwiseFloatingSemantics, DivisionByZeroFollowsIeee) {
  using T = TypeParam;
  constexpr double inf = std::numeric_limits<double>::infinity();
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    const auto a = ferry::to_device(dev, {T(1.0F), T(-1.0F), T(0.0F)}, Shape{3});
    const auto z = ferry::zeros<T>(dev, Shape{3});
    DeviceArray<T> q;
    ASSERT_NO_THROW(q = a / z);
    const ferry::HostArray<T> h = q.to_host();  // no error: only integers refuse
    ferry_test::expect_values<T>({inf, -inf, std::nan("")}, h.data());
    ferry_test::expect_values<T>({inf, -inf, std::nan("")}, (a / 0).to_host().data());
  });
}

TYPED_TEST(ElementwiseFloatingSemantics, MaximumMinimumAndReluPropagateNaN) {
  using T = TypeParam;
  constexpr double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    const T n = nan_of<T>();
    const T i = std::numeric_limits<T>::infinity();
    const T minus_i = static_cast<T>(-static_cast<Plain<T>>(i));
    // NaN first, NaN second, both, and a non-NaN pair, so the position cannot matter.
    const auto a = ferry::to_device(dev, {n, T(1.0F), n, T(2.0F)}, Shape{4});
    const auto b = ferry::to_device(dev, {T(1.0F), n, n, minus_i}, Shape{4});
    const auto [mx, mn] = ferry::to_host(ferry::maximum(a, b), ferry::minimum(a, b));
    ferry_test::expect_values<T>({nan, nan, nan, 2}, mx.data());
    ferry_test::expect_values<T>({nan, nan, nan, -inf}, mn.data());
    // A NaN scalar poisons every element, on either side; a NaN array element survives any
    // scalar, even an infinite one.
    const auto finite = ferry::to_device(dev, {T(-1.0F), T(0.0F), T(3.0F)}, Shape{3});
    ferry_test::expect_values<T>({nan, nan, nan}, ferry::maximum(finite, nan).to_host().data());
    ferry_test::expect_values<T>({nan, nan, nan}, ferry::minimum(nan, finite).to_host().data());
    ferry_test::expect_values<T>({nan, inf, nan, inf}, ferry::maximum(a, inf).to_host().data());
    ferry_test::expect_values<T>({nan, -inf, nan, -inf}, ferry::minimum(-inf, a).to_host().data());
    const auto r = ferry::to_device(dev, {n, minus_i, T(-1.0F), T(0.0F), T(2.0F), i}, Shape{6});
    ferry_test::expect_values<T>({nan, 0, 0, 0, 2, inf}, ferry::relu(r).to_host().data());
  });
}

TYPED_TEST(ElementwiseFloatingSemantics, PowOfSpecialOperands) {
  using T = TypeParam;
  constexpr double inf = std::numeric_limits<double>::infinity();
  ferry_test::for_each_executor([&](const ferry::Device& dev) {
    const auto base =
        ferry::to_device(dev, {T(-2.0F), T(4.0F), T(0.0F), T(-8.0F), T(5.0F)}, Shape{5});
    const auto exps =
        ferry::to_device(dev, {T(3.0F), T(0.5F), T(-1.0F), T(0.5F), T(0.0F)}, Shape{5});
    // A negative base with an integral exponent is real; with a fractional one it is NaN.
    ferry_test::expect_values<T>({-8, 2, inf, std::nan(""), 1},
                                 ferry::pow(base, exps).to_host().data());
    // Negative floating exponents are fine (only integers refuse them).
    ferry_test::expect_values<T>(
        {0.25, 0.25}, ferry::pow(ferry::full<T>(dev, Shape{2}, T(2.0F)), -2).to_host().data());
  });
}

// GELU is x * Phi(x) with the exact erf, not the tanh approximation; at these points the two
// differ by more than the float tolerance, which the test checks first so it can fail.
template <class T>
void check_gelu_is_erf_form(const ferry::Device& dev) {
  const std::vector<double> xs{-3, -1.5, 1, 1.5};
  std::vector<double> exact;
  std::vector<T> in;
  for (double x : xs) {
    const double erf_form = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    const double tanh_form =
        0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    ASSERT_GT(std::abs(erf_form - tanh_form), 10 * ferry_test::tolerance<T>());
    exact.push_back(erf_form);
    in.push_back(static_cast<T>(x));
  }
  const ferry::HostArray<T> h = ferry::gelu(ferry::to_device(dev, in, Shape{4})).to_host();
  ferry_test::expect_values<T>(exact, h.data());
}

class ElementwiseGelu : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ElementwiseGelu);

TEST_P(ElementwiseGelu, IsTheExactErfForm) {
  check_gelu_is_erf_form<float>(dev);
  check_gelu_is_erf_form<double>(dev);
}

// In the negative tail x * Phi(x) is tiny, and 1 + erf(x / sqrt 2) in float cancels: gelu(-5)
// came out 4% off and gelu(-10) as -0. Through erfc, float keeps a few ulps of the double
// value. silu(-inf), like gelu(-inf), is its limit 0, not -inf * 0.
TEST_P(ElementwiseGelu, KeepsItsAccuracyInTheNegativeTail) {
  const std::vector<float> xs{-5, -8, -10, -12};
  const ferry::HostArray<float> h = ferry::gelu(ferry::to_device(dev, xs, Shape{4})).to_host();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double want = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    EXPECT_NEAR(h.data()[i] / want, 1.0, 1e-5) << "gelu(" << x << ") = " << h.data()[i];
  }
  const std::vector<float> tails{-INFINITY, -1e30F};
  const ferry::HostArray<float> s = ferry::silu(ferry::to_device(dev, tails, Shape{2})).to_host();
  EXPECT_EQ(s.data()[0], 0.0F);
  EXPECT_EQ(s.data()[1], 0.0F);
}

// ---------------------------------------------------------------------------------------------
// bfloat16: computed in float, rounded once.

class ElementwiseBfloat16 : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ElementwiseBfloat16);

TEST_P(ElementwiseBfloat16, ResultsRoundOnceToNearestEven) {
  const bfloat16 one(1.0F);
  const bfloat16 step = bfloat16::from_bits(0x3b80);  // 2^-8: half a bfloat16 ulp at 1
  ASSERT_EQ(static_cast<float>(step), 0.00390625F);
  const bfloat16 odd = bfloat16::from_bits(0x3f81);  // 1 + 2^-7, odd last mantissa bit
  const auto a = ferry::to_device(dev, {one, odd, std::numeric_limits<bfloat16>::max()}, Shape{3});
  const auto b = ferry::to_device(dev, {step, step, bfloat16::from_bits(0x7b00)}, Shape{3});
  const ferry::HostArray<bfloat16> h = (a + b).to_host();
  EXPECT_EQ(h(0).bits, 0x3f80);  // 1 + 2^-8 is a tie: to even, down to 1
  EXPECT_EQ(h(1).bits, 0x3f82);  // 1 + 2^-7 + 2^-8 is a tie: to even, up
  // max + 2^119 is finite in float (2^128 - 2^119) but a tie past the largest bfloat16, whose
  // mantissa is odd: it rounds up, to infinity.
  EXPECT_EQ(h(2).bits, 0x7f80);
}

TEST_P(ElementwiseBfloat16, DoubleScalarsRoundOnce) {
  // 1 + 2^-8 + 2^-30 is just above the tie between 1 and 1 + 2^-7. Through float it would
  // lose the 2^-30, become the tie, and round to 1; rounded once it is 1 + 2^-7.
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  const auto z = ferry::zeros<bfloat16>(dev, Shape{2});
  const ferry::HostArray<bfloat16> h = (z + above_tie).to_host();
  EXPECT_EQ(h(0).bits, 0x3f81);
  EXPECT_EQ((above_tie - z).to_host()(1).bits, 0x3f81);
}

// ---------------------------------------------------------------------------------------------
// Ops compose into graphs; the result is the reference of the whole expression.

class ElementwiseComposition : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ElementwiseComposition);

TEST_P(ElementwiseComposition, AChainMatchesItsReference) {
  const Shape shape{4, 5};
  const std::vector<double> va = ferry_test::random_values<double>(20, 21);
  const std::vector<double> vb = ferry_test::random_values<double>(5, 22);
  const auto a = ferry::to_device(dev, va, shape);
  const auto b = ferry::to_device(dev, vb, Shape{5});
  const auto y = ferry::sigmoid(ferry::relu(a * b + 1) / (ferry::abs(b) + 2)) -
                 ferry::maximum(ferry::tanh(a), 0.25) * ferry::exp(-b);
  std::vector<double> expected;
  for (std::size_t i = 0; i < 20; ++i) {
    const double x = va[i];
    const double w = vb[i % 5];
    const double relu = std::max(x * w + 1, 0.0);
    expected.push_back(1 / (1 + std::exp(-relu / (std::abs(w) + 2))) -
                       std::max(std::tanh(x), 0.25) * std::exp(-w));
  }
  const ferry::HostArray<double> h = y.to_host();
  ferry_test::expect_values<double>(expected, h.data());
}

// ---------------------------------------------------------------------------------------------
// Metadata is synchronous: the stepped executor shows nothing has run when the call returns.

TEST(ElementwiseMetadata, ResultsAreKnownBeforeAnythingRuns) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  const auto a = ferry::to_device(dev, {1, 2, 3}, Shape{3, 1});
  const auto b = ferry::to_device(dev, {10, 20}, Shape{2});
  const auto y = ferry::maximum(a * b, 25);
  const auto e = ferry::exp(ferry::to_device(dev, {0.0F}, Shape{}));
  static_assert(std::is_same_v<decltype(y), const DeviceArray<int>>);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.dtype(), ferry::DType::int32);
  EXPECT_EQ(e.shape(), Shape{});
  EXPECT_FALSE(y.ready());
  EXPECT_FALSE(e.ready());
  const ferry::HostArray<int> h = y.to_host();
  EXPECT_EQ(std::vector<int>(h.data().begin(), h.data().end()),
            (std::vector<int>{25, 25, 25, 40, 30, 60}));
}

// ---------------------------------------------------------------------------------------------
// Errors at the call: shapes, devices, empty handles.

class ElementwiseErrors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ElementwiseErrors);

std::string no_broadcast(std::string_view op, const Shape& a, const Shape& b) {
  return "[" + std::string(op) + "] shapes " + a.to_string() + " and " + b.to_string() +
         " do not broadcast";
}

TEST_P(ElementwiseErrors, ShapesThatDoNotBroadcastThrowAtTheCall) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 3});
  const auto b = ferry::zeros<float>(dev, Shape{4, 3});
  expect_error<ferry::ShapeError>([&] { return ferry::add(a, b); },
                                  "[add] shapes (2, 3) and (4, 3) do not broadcast");
  // Each op names itself; an operator names the function it stands for.
  expect_error<ferry::ShapeError>([&] { return ferry::subtract(b, a); },
                                  no_broadcast("subtract", Shape{4, 3}, Shape{2, 3}));
  expect_error<ferry::ShapeError>([&] { return ferry::multiply(a, b); },
                                  no_broadcast("multiply", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return ferry::divide(a, b); },
                                  no_broadcast("divide", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return ferry::maximum(a, b); },
                                  no_broadcast("maximum", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return ferry::minimum(a, b); },
                                  no_broadcast("minimum", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return ferry::pow(a, b); },
                                  no_broadcast("pow", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return a + b; },
                                  no_broadcast("add", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return a - b; },
                                  no_broadcast("subtract", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return a * b; },
                                  no_broadcast("multiply", Shape{2, 3}, Shape{4, 3}));
  expect_error<ferry::ShapeError>([&] { return a / b; },
                                  no_broadcast("divide", Shape{2, 3}, Shape{4, 3}));

  // Rank mismatch where the trailing dims conflict.
  const auto v = ferry::zeros<std::int64_t>(dev, Shape{3});
  const auto m = ferry::zeros<std::int64_t>(dev, Shape{2, 1, 4});
  expect_error<ferry::ShapeError>([&] { return v + m; },
                                  no_broadcast("add", Shape{3}, Shape{2, 1, 4}));
  // A size 0 combines with 1 only, not with 2.
  const auto empty = ferry::zeros<std::int32_t>(dev, Shape{0});
  const auto two = ferry::zeros<std::int32_t>(dev, Shape{2});
  expect_error<ferry::ShapeError>([&] { return empty * two; },
                                  no_broadcast("multiply", Shape{0}, Shape{2}));
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::zeros<bfloat16>(dev, Shape{2, 0}) - ferry::zeros<bfloat16>(dev, Shape{2, 3});
      },
      no_broadcast("subtract", Shape{2, 0}, Shape{2, 3}));
  // A mismatch in a leading dim, behind a matching broadcast one.
  EXPECT_THROW(
      (void)(ferry::zeros<double>(dev, Shape{3, 1, 5}) + ferry::zeros<double>(dev, Shape{2, 4, 5})),
      ferry::ShapeError);
}

TEST_P(ElementwiseErrors, ArraysOnTwoDevicesThrowDeviceMismatchAtTheCall) {
  const ferry::Device other = ferry_test::make_device(GetParam());
  const auto a = ferry::ones<float>(dev, Shape{2, 3});
  const auto b = ferry::ones<float>(other, Shape{2, 3});
  expect_error<ferry::DeviceMismatch>(
      [&] { return ferry::add(a, b); },
      "[add] arrays live on different devices: " + dev.name() + " and " + other.name());
  expect_error<ferry::DeviceMismatch>(
      [&] { return b / a; },
      "[divide] arrays live on different devices: " + other.name() + " and " + dev.name());
  // The device names are "modeled:N", N counting the devices this process made.
  for (const ferry::Device& d : {dev, other}) {
    const std::string name = d.name();
    ASSERT_EQ(name.rfind("modeled:", 0), 0u) << name;
    EXPECT_TRUE(name.size() > 8 && name.find_first_not_of("0123456789", 8) == std::string::npos)
        << name;
  }
  EXPECT_THROW((void)(a * b), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::maximum(a, b), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::minimum(a, b), ferry::DeviceMismatch);
  EXPECT_THROW((void)ferry::pow(a, b), ferry::DeviceMismatch);
  // Even when broadcasting would work, and with the host CPU as the other device.
  const auto cpu = ferry::ones<float>(ferry::Device::cpu(), Shape{});
  expect_error<ferry::DeviceMismatch>(
      [&] { return a - cpu; },
      "[subtract] arrays live on different devices: " + dev.name() + " and cpu");
}

TEST_P(ElementwiseErrors, EmptyHandlesThrowInvalidArgumentAtTheCall) {
  const DeviceArray<float> empty;
  const auto a = ferry::ones<float>(dev, Shape{2});
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::add(empty, a); },
      "[add] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::exp(empty); },
      "[exp] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  EXPECT_THROW((void)ferry::add(a, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)(empty + 1), ferry::InvalidArgument);
  EXPECT_THROW((void)(2.0 * empty), ferry::InvalidArgument);
  EXPECT_THROW((void)(a - empty), ferry::InvalidArgument);
  EXPECT_THROW((void)(empty / a), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::maximum(empty, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::minimum(0, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::pow(empty, empty), ferry::InvalidArgument);
  EXPECT_THROW((void)-empty, ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::neg(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::abs(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::relu(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::log(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::sqrt(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::sigmoid(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::tanh(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::gelu(empty), ferry::InvalidArgument);
  const DeviceArray<std::int32_t> empty_int;
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::abs(empty_int); },
      "[abs] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

}  // namespace

}  // namespace test_elementwise
