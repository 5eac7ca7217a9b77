// Reductions (sum, mean, max, min over any set of axes, keepdims), argmax and softmax, for
// every element type each accepts, against plain reference loops; NaN, empty extents, wrap-
// around, accumulation precision, numerical stability, and the errors thrown at the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/reference.hpp"

namespace test_reduce {

namespace {

using ferry_test::values_of;

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::Shape;
using ferry_test::expect_values;
using ferry_test::for_each_executor;
using ferry_test::OnEachExecutor;
using ferry_test::random_values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
double to_double(T x) {
  if constexpr (ferry::HalfFloating<T>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

template <class T>
std::vector<double> doubles(std::span<const T> v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (const T& x : v) out.push_back(to_double(x));
  return out;
}

// ---- reference machinery: written from the definitions, sharing nothing with ferry ----

/// Which dimensions `axes` names: all of them when the list is empty; -1 is the last.
std::vector<bool> reduced_flags(const std::vector<int>& axes, std::size_t rank) {
  std::vector<bool> flags(rank, axes.empty());
  for (int a : axes) flags[static_cast<std::size_t>(a < 0 ? a + static_cast<int>(rank) : a)] = true;
  return flags;
}

/// The shape left after the reduction: reduced dimensions vanish, or stay as 1 with keepdims.
Shape reduced_shape(const Shape& in, const std::vector<bool>& flags, bool keepdims) {
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    if (!flags[d])
      dims.push_back(in.dims()[d]);
    else if (keepdims)
      dims.push_back(1);
  }
  return Shape(std::span<const std::int64_t>(dims));
}

/// For each input element (row-major), the flat index of the output element it folds into.
std::vector<std::int64_t> destinations(const Shape& in, const std::vector<bool>& flags) {
  std::vector<std::int64_t> dest(static_cast<std::size_t>(in.numel()));
  for (std::int64_t f = 0; f < in.numel(); ++f) {
    const std::vector<std::int64_t> idx = ferry_test::unravel(f, in);
    std::int64_t o = 0;
    for (std::size_t d = 0; d < in.rank(); ++d) {
      if (!flags[d]) o = o * in.dims()[d] + idx[d];
    }
    dest[static_cast<std::size_t>(f)] = o;
  }
  return dest;
}

std::int64_t kept_count(const Shape& in, const std::vector<bool>& flags) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    if (!flags[d]) n *= in.dims()[d];
  }
  return n;
}

enum class Op { sum, mean, max, min };

const char* name_of(Op op) {
  switch (op) {
    case Op::sum:
      return "sum";
    case Op::mean:
      return "mean";
    case Op::max:
      return "max";
    case Op::min:
      return "min";
  }
  return "?";
}

template <class T>
ferry::DeviceArray<T> apply(Op op, const ferry::DeviceArray<T>& a, const std::vector<int>& axes,
                            bool keepdims) {
  switch (op) {
    case Op::sum:
      return ferry::sum(a, axes, keepdims);
    case Op::max:
      return ferry::max(a, axes, keepdims);
    case Op::min:
      return ferry::min(a, axes, keepdims);
    case Op::mean:
      if constexpr (ferry::Floating<T>) return ferry::mean(a, axes, keepdims);
      break;
  }
  ADD_FAILURE() << name_of(op) << " does not apply to this element type";
  return {};
}

/// Floating reference: sums and means in double (NaN for a mean of nothing); max and min
/// propagate NaN. One double per output element.
template <class T>
std::vector<double> reference_floating(Op op, const std::vector<T>& values, const Shape& in,
                                       const std::vector<bool>& flags) {
  const std::int64_t n_out = kept_count(in, flags);
  const std::vector<std::int64_t> dest = destinations(in, flags);
  const double init = op == Op::max ? -kInf : op == Op::min ? kInf : 0.0;
  std::vector<double> acc(static_cast<std::size_t>(n_out), init);
  std::vector<std::int64_t> count(static_cast<std::size_t>(n_out), 0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto o = static_cast<std::size_t>(dest[i]);
    const double x = to_double(values[i]);
    ++count[o];
    double& a = acc[o];
    switch (op) {
      case Op::sum:
      case Op::mean:
        a += x;
        break;
      case Op::max:
        a = (std::isnan(a) || std::isnan(x)) ? kNaN : std::max(a, x);
        break;
      case Op::min:
        a = (std::isnan(a) || std::isnan(x)) ? kNaN : std::min(a, x);
        break;
    }
  }
  if (op == Op::mean) {
    for (std::size_t o = 0; o < acc.size(); ++o) {
      acc[o] = count[o] == 0 ? kNaN : acc[o] / static_cast<double>(count[o]);
    }
  }
  return acc;
}

/// Integer reference: sums wrap (computed in unsigned arithmetic), max and min are exact.
template <class T>
std::vector<T> reference_integer(Op op, const std::vector<T>& values, const Shape& in,
                                 const std::vector<bool>& flags) {
  using U = std::make_unsigned_t<T>;
  const std::int64_t n_out = kept_count(in, flags);
  const std::vector<std::int64_t> dest = destinations(in, flags);
  std::vector<U> sums(static_cast<std::size_t>(n_out), 0);
  std::vector<T> ext(static_cast<std::size_t>(n_out),
                     op == Op::max ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto o = static_cast<std::size_t>(dest[i]);
    sums[o] = static_cast<U>(sums[o] + static_cast<U>(values[i]));
    ext[o] = op == Op::max ? std::max(ext[o], values[i]) : std::min(ext[o], values[i]);
  }
  if (op != Op::sum) return ext;
  std::vector<T> out;
  for (U s : sums) out.push_back(static_cast<T>(s));
  return out;
}

/// Reduces `values` (of `shape`) on `dev` and checks the shape at the call and every value.
template <class T>
void check_reduce(const ferry::Device& dev, Op op, const std::vector<T>& values, const Shape& shape,
                  const std::vector<int>& axes, bool keepdims) {
  std::ostringstream what;
  what << name_of(op) << " of " << shape.to_string() << " over {";
  for (int a : axes) what << a << ' ';
  what << "} keepdims=" << keepdims;
  SCOPED_TRACE(what.str());
  const std::vector<bool> flags = reduced_flags(axes, shape.rank());
  const auto a = ferry::to_device(dev, values, shape);
  const ferry::DeviceArray<T> r = apply(op, a, axes, keepdims);
  ASSERT_TRUE(r.valid());
  EXPECT_EQ(r.shape(), reduced_shape(shape, flags, keepdims));
  const ferry::HostArray<T> h = r.to_host();
  if constexpr (std::is_integral_v<T>) {
    EXPECT_EQ(values_of(h), reference_integer(op, values, shape, flags));
  } else if (op == Op::max || op == Op::min) {
    // The result is one of the inputs, unchanged: exact.
    const std::vector<double> expected = reference_floating(op, values, shape, flags);
    const std::vector<double> got = doubles<T>(h.data());
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(expected[i]))
        EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
      else
        EXPECT_EQ(got[i], expected[i]) << "at " << i;
    }
  } else {
    expect_values<T>(reference_floating(op, values, shape, flags), h.data());
  }
}

struct Case {
  Shape shape;
  std::vector<int> axes;
};

/// Shapes and axis sets every reduction is swept over: scalars, size-1 dimensions, negative
/// and unordered axes, non-adjacent sets of a rank-4 array, the empty list (all axes), and a
/// long axis.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {Shape{}, {}},
      {Shape{5}, {}},
      {Shape{5}, {0}},
      {Shape{5}, {-1}},
      {Shape{3, 4}, {0}},
      {Shape{3, 4}, {1}},
      {Shape{3, 4}, {-1, 0}},
      {Shape{3, 4}, {}},
      {Shape{2, 3, 4, 5}, {0, 2}},
      {Shape{2, 3, 4, 5}, {1, 3}},
      {Shape{2, 3, 4, 5}, {-1, -3}},
      {Shape{2, 3, 4, 5}, {3}},
      {Shape{2, 3, 4, 5}, {0}},
      {Shape{2, 3, 4, 5}, {2, 0, 3}},
      {Shape{2, 3, 4, 5}, {0, 1, 2, 3}},
      {Shape{2, 1, 3}, {1}},
      {Shape{2, 1, 3}, {0, 2}},
      {Shape{1, 1}, {0}},
      {Shape{300, 7}, {0}},
      {Shape{7, 300}, {1}},
  };
  return all;
}

template <class T>
class Reduce : public ::testing::Test {};
TYPED_TEST_SUITE(Reduce, ferry_test::NumericTypes);

TYPED_TEST(Reduce, SumMaxMinMatchReferenceLoops) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    unsigned seed = 1;
    for (const Case& c : cases()) {
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(c.shape.numel()), seed++);
      for (bool keepdims : {false, true}) {
        for (Op op : {Op::sum, Op::max, Op::min})
          check_reduce(dev, op, v, c.shape, c.axes, keepdims);
      }
    }
  });
}

// Literals, so the reductions are not checked against the reference loops alone: every
// numeric type but uint8, which holds -1 as 255 (the reference loops and ReduceInt cover it).
template <class T>
class ReduceSigned : public ::testing::Test {};
using SignedTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, ferry::bfloat16,
                                     ferry::float16, std::int8_t, std::int16_t>;
TYPED_TEST_SUITE(ReduceSigned, SignedTypes);

TYPED_TEST(ReduceSigned, KnownValues) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const auto a =
        ferry::to_device(dev, std::vector<T>{T(3), T(-1), T(4), T(1), T(-5), T(9)}, Shape{2, 3});
    EXPECT_EQ(doubles<T>(ferry::sum(a).to_host().data()), std::vector<double>{11});
    EXPECT_EQ(doubles<T>(ferry::sum(a, {0}).to_host().data()), (std::vector<double>{4, -6, 13}));
    EXPECT_EQ(doubles<T>(ferry::sum(a, {1}, true).to_host().data()), (std::vector<double>{6, 5}));
    EXPECT_EQ(ferry::sum(a, {1}, true).shape(), (Shape{2, 1}));
    EXPECT_EQ(doubles<T>(ferry::max(a, {-1}).to_host().data()), (std::vector<double>{4, 9}));
    EXPECT_EQ(doubles<T>(ferry::min(a, {0}).to_host().data()), (std::vector<double>{1, -5, 4}));
    EXPECT_EQ(doubles<T>(ferry::min(a).to_host().data()), std::vector<double>{-5});
    EXPECT_EQ(ferry::max(a, {}, true).shape(), (Shape{1, 1}));
  });
}

TYPED_TEST(Reduce, ExtremeValuesSurviveMaxAndMin) {
  using T = TypeParam;
  // The identities max and min start from must not leak into a result made of the extremes.
  for_each_executor([](const ferry::Device& dev) {
    const T lo = std::numeric_limits<T>::lowest();
    const T hi = std::numeric_limits<T>::max();
    const auto low = ferry::to_device(dev, std::vector<T>{lo, lo, lo}, Shape{3});
    const auto high = ferry::to_device(dev, std::vector<T>{hi, hi, hi}, Shape{3});
    EXPECT_EQ(to_double(ferry::max(low).to_host()()), to_double(lo));
    EXPECT_EQ(to_double(ferry::min(high).to_host()()), to_double(hi));
    const auto both = ferry::to_device(dev, std::vector<T>{hi, lo}, Shape{2});
    EXPECT_EQ(to_double(ferry::max(both).to_host()()), to_double(hi));
    EXPECT_EQ(to_double(ferry::min(both).to_host()()), to_double(lo));
  });
}

TYPED_TEST(Reduce, EmptyExtents) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> none;
    // Summing nothing gives 0; reducing a non-empty axis of an empty array gives an empty one.
    check_reduce(dev, Op::sum, none, Shape{2, 0, 3}, {1}, false);
    check_reduce(dev, Op::sum, none, Shape{2, 0, 3}, {1}, true);
    check_reduce(dev, Op::sum, none, Shape{2, 0, 3}, {}, false);
    check_reduce(dev, Op::sum, none, Shape{2, 0, 3}, {0, 2}, false);
    check_reduce(dev, Op::sum, none, Shape{0}, {}, false);
    EXPECT_EQ(
        doubles<T>(ferry::sum(ferry::to_device(dev, none, Shape{0, 4}), {0}).to_host().data()),
        std::vector<double>(4, 0.0));
    for (Op op : {Op::max, Op::min}) {
      // max and min need no identity when the reduced axis itself is not empty.
      check_reduce(dev, op, none, Shape{2, 0, 3}, {2}, false);
      check_reduce(dev, op, none, Shape{2, 0, 3}, {0}, true);
    }
  });
}

template <class T>
class ReduceInt : public ::testing::Test {};
using IntTypes = ::testing::Types<std::int32_t, std::int64_t, std::int8_t, std::int16_t>;
TYPED_TEST_SUITE(ReduceInt, IntTypes);

TYPED_TEST(ReduceInt, SumsWrapAround) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const T hi = std::numeric_limits<T>::max();
    const T lo = std::numeric_limits<T>::min();
    const auto a = ferry::to_device(dev, std::vector<T>{hi, 1, lo, -1, hi, hi}, Shape{3, 2});
    // Row sums: max + 1 wraps to min; min - 1 wraps to max; max + max wraps to -2.
    EXPECT_EQ(values_of(ferry::sum(a, {1}).to_host()), (std::vector<T>{lo, hi, -2}));
    // Column sums: max + min + max = max - 1;  1 - 1 + max = max.
    EXPECT_EQ(values_of(ferry::sum(a, {0}).to_host()),
              (std::vector<T>{static_cast<T>(hi - 1), hi}));
    // Everything: (max - 1) + max = -3 after wrapping.
    EXPECT_EQ(values_of(ferry::sum(a).to_host()), std::vector<T>{-3});
  });
}

template <class T>
class ReduceFloating : public ::testing::Test {};
TYPED_TEST_SUITE(ReduceFloating, ferry_test::FloatingTypes);

TYPED_TEST(ReduceFloating, MeanMatchesReferenceLoops) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    unsigned seed = 100;
    for (const Case& c : cases()) {
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(c.shape.numel()), seed++);
      for (bool keepdims : {false, true}) check_reduce(dev, Op::mean, v, c.shape, c.axes, keepdims);
    }
    const auto a = ferry::to_device(dev, std::vector<T>{T(1), T(2), T(3), T(6)}, Shape{2, 2});
    EXPECT_EQ(doubles<T>(ferry::mean(a, {0}).to_host().data()), (std::vector<double>{2, 4}));
    EXPECT_EQ(doubles<T>(ferry::mean(a).to_host().data()), std::vector<double>{3});
  });
}

TYPED_TEST(ReduceFloating, MeanOverNothingIsNaN) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> none;
    check_reduce(dev, Op::mean, none, Shape{2, 0, 3}, {1}, false);
    check_reduce(dev, Op::mean, none, Shape{2, 0, 3}, {}, true);
    check_reduce(dev, Op::mean, none, Shape{2, 0, 3}, {0}, false);  // empty result, no NaN
    const auto h = ferry::mean(ferry::to_device(dev, none, Shape{0})).to_host();
    EXPECT_EQ(h.shape(), Shape{});
    EXPECT_TRUE(std::isnan(to_double(h())));
  });
}

TYPED_TEST(ReduceFloating, SumsAccumulateInDouble) {
  using T = TypeParam;
  // 2^15 + 2^-10 - 2^15: float (and bfloat16) arithmetic loses the 2^-10 in the first
  // addition; a double accumulator keeps it. All three values are exact in every floating type
  // (float16 included: 2^30 would not be).
  for_each_executor([](const ferry::Device& dev) {
    const auto a =
        ferry::to_device(dev, std::vector<T>{T(0x1p15f), T(0x1p-10f), T(-0x1p15f)}, Shape{3});
    EXPECT_EQ(to_double(ferry::sum(a).to_host()()), 0x1p-10);
    expect_values<T>({0x1p-10 / 3}, ferry::mean(a).to_host().data());
  });
}

TYPED_TEST(ReduceFloating, MaxAndMinPropagateNaN) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const T nan = std::numeric_limits<T>::quiet_NaN();
    // NaN first, in the middle and last along the reduced axis: each must win.
    std::vector<T> v = random_values<T>(4 * 5, 7);
    v[0] = nan;       // row 0, column 0
    v[5 + 2] = nan;   // row 1, column 2
    v[15 + 4] = nan;  // row 3, column 4
    for (Op op : {Op::max, Op::min, Op::sum, Op::mean}) {
      for (const std::vector<int>& axes :
           {std::vector<int>{0}, std::vector<int>{1}, std::vector<int>{}}) {
        check_reduce(dev, op, v, Shape{4, 5}, axes, false);
      }
    }
    const auto a = ferry::to_device(dev, v, Shape{4, 5});
    const std::vector<double> row_max = doubles<T>(ferry::max(a, {1}).to_host().data());
    EXPECT_TRUE(std::isnan(row_max[0]) && std::isnan(row_max[1]) && std::isnan(row_max[3]));
    EXPECT_FALSE(std::isnan(row_max[2]));
    // Infinities are ordinary values.
    const auto inf = ferry::to_device(
        dev,
        std::vector<T>{T(-INFINITY), T(1.0f), T(-INFINITY), T(-INFINITY), T(INFINITY), T(2.0f)},
        Shape{3, 2});
    EXPECT_EQ(doubles<T>(ferry::max(inf, {1}).to_host().data()),
              (std::vector<double>{1, -kInf, kInf}));
    EXPECT_EQ(doubles<T>(ferry::min(inf, {0}).to_host().data()),
              (std::vector<double>{-kInf, -kInf}));
    EXPECT_EQ(doubles<T>(ferry::max(inf).to_host().data()), std::vector<double>{kInf});
    EXPECT_EQ(doubles<T>(ferry::min(inf).to_host().data()), std::vector<double>{-kInf});
  });
}

// ---- argmax ----

/// Index along `axis` of the first largest value, or of the first NaN.
template <class T>
std::vector<std::int64_t> reference_argmax(const std::vector<T>& values, const Shape& shape,
                                           std::size_t axis) {
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= shape.dims()[d];
  for (std::size_t d = axis + 1; d < shape.rank(); ++d) inner *= shape.dims()[d];
  const std::int64_t size = shape.dims()[axis];
  std::vector<std::int64_t> out;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      auto at = [&](std::int64_t i) {
        return to_double(values[static_cast<std::size_t>((o * size + i) * inner + j)]);
      };
      std::int64_t best = 0;
      for (std::int64_t i = 1; i < size && !std::isnan(at(best)); ++i) {
        if (std::isnan(at(i)) || at(i) > at(best)) best = i;
      }
      out.push_back(best);
    }
  }
  return out;
}

template <class T>
void check_argmax(const ferry::Device& dev, const std::vector<T>& values, const Shape& shape,
                  int axis, bool keepdims) {
  SCOPED_TRACE("argmax of " + shape.to_string() + " along " + std::to_string(axis) +
               (keepdims ? " keepdims" : ""));
  const auto d = static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(shape.rank()) : axis);
  std::vector<bool> flags(shape.rank(), false);
  flags[d] = true;
  const ferry::DeviceArray<std::int64_t> r =
      ferry::argmax(ferry::to_device(dev, values, shape), axis, keepdims);
  EXPECT_EQ(r.shape(), reduced_shape(shape, flags, keepdims));
  EXPECT_EQ(values_of(r.to_host()), reference_argmax(values, shape, d));
}

/// Values with many ties: small integers for every type, so the first-maximum rule matters.
template <class T>
std::vector<T> tied_values(std::size_t n, unsigned seed) {
  const std::vector<std::int32_t> small = random_values<std::int32_t>(n, seed);
  std::vector<T> out;
  for (std::int32_t x : small) {
    // Integers convert from int32 (an unsigned type wraps a negative value, which is defined);
    // a float beyond an integer type's range would not be.
    if constexpr (std::is_integral_v<T>) {
      out.push_back(static_cast<T>(x / 3));
    } else {
      out.push_back(static_cast<T>(static_cast<float>(x / 3)));
    }
  }
  return out;
}

template <class T>
class Argmax : public ::testing::Test {};
TYPED_TEST_SUITE(Argmax, ferry_test::NumericTypes);

TYPED_TEST(Argmax, MatchesReferenceLoop) {
  using T = TypeParam;
  struct ArgCase {
    Shape shape;
    int axis;
  };
  const ArgCase all[] = {{Shape{7}, 0},        {Shape{7}, -1},         {Shape{3, 4}, 0},
                         {Shape{3, 4}, 1},     {Shape{3, 4}, -2},      {Shape{2, 3, 4}, 1},
                         {Shape{2, 3, 4}, -1}, {Shape{2, 3, 4, 5}, 2}, {Shape{2, 1, 3}, 1},
                         {Shape{1}, 0},        {Shape{0, 3}, 1},       {Shape{3, 0}, 0},
                         {Shape{5, 300}, 1},   {Shape{300, 5}, 0}};
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 1;
    for (const ArgCase& c : all) {
      const auto n = static_cast<std::size_t>(c.shape.numel());
      for (bool keepdims : {false, true}) {
        check_argmax(dev, random_values<T>(n, seed), c.shape, c.axis, keepdims);
        check_argmax(dev, tied_values<T>(n, seed), c.shape, c.axis, keepdims);
      }
      ++seed;
    }
  });
}

TYPED_TEST(Argmax, FirstMaximumWinsTies) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const auto a = ferry::to_device(
        dev, std::vector<T>{T(1), T(5), T(5), T(2), T(3), T(3), T(3), T(3)}, Shape{2, 4});
    const auto h = ferry::argmax(a, 1).to_host();
    EXPECT_EQ(values_of(h), (std::vector<std::int64_t>{1, 0}));
    const auto k = ferry::argmax(a, 0, true);
    EXPECT_EQ(k.shape(), (Shape{1, 4}));
    EXPECT_EQ(values_of(k.to_host()), (std::vector<std::int64_t>{1, 0, 0, 1}));
    const T lo = std::numeric_limits<T>::lowest();
    const auto low = ferry::to_device(dev, std::vector<T>{lo, lo, lo}, Shape{3});
    EXPECT_EQ(ferry::argmax(low, 0).to_host()(), 0);
  });
}

template <class T>
class ArgmaxFloating : public ::testing::Test {};
TYPED_TEST_SUITE(ArgmaxFloating, ferry_test::FloatingTypes);

TYPED_TEST(ArgmaxFloating, FirstNaNWins) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const T nan = std::numeric_limits<T>::quiet_NaN();
    // Row 0: NaN after the maximum; row 1: two NaNs, the first at 1; row 2: NaN first;
    // row 3: none (and -inf everywhere: index 0).
    const auto a =
        ferry::to_device(dev,
                         std::vector<T>{T(1), T(9), nan, T(2),  //
                                        T(9), nan, T(0), nan,   //
                                        nan, T(9), T(9), T(1),  //
                                        T(-INFINITY), T(-INFINITY), T(-INFINITY), T(-INFINITY)},
                         Shape{4, 4});
    EXPECT_EQ(values_of(ferry::argmax(a, 1).to_host()), (std::vector<std::int64_t>{2, 1, 0, 0}));
    EXPECT_EQ(values_of(ferry::argmax(a, 0).to_host()), (std::vector<std::int64_t>{2, 1, 0, 1}));
    std::vector<T> v = random_values<T>(6 * 7, 3);
    v[3] = nan;
    v[7 * 4 + 2] = nan;
    v[7 * 4 + 5] = nan;
    check_argmax(dev, v, Shape{6, 7}, 0, false);
    check_argmax(dev, v, Shape{6, 7}, 1, true);
  });
}

// ---- softmax ----

/// Softmax along `axis` in double, shifted by the maximum (NaN in, NaN out).
template <class T>
std::vector<double> reference_softmax(const std::vector<T>& values, const Shape& shape,
                                      std::size_t axis) {
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= shape.dims()[d];
  for (std::size_t d = axis + 1; d < shape.rank(); ++d) inner *= shape.dims()[d];
  const std::int64_t size = shape.dims()[axis];
  std::vector<double> out(values.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      auto at = [&](std::int64_t i) {
        return static_cast<std::size_t>((o * size + i) * inner + j);
      };
      double mx = -kInf;
      for (std::int64_t i = 0; i < size; ++i) mx = std::max(mx, to_double(values[at(i)]));
      double total = 0;
      for (std::int64_t i = 0; i < size; ++i) total += std::exp(to_double(values[at(i)]) - mx);
      for (std::int64_t i = 0; i < size; ++i)
        out[at(i)] = std::exp(to_double(values[at(i)]) - mx) / total;
    }
  }
  return out;
}

template <class T>
void check_softmax(const ferry::Device& dev, const std::vector<T>& values, const Shape& shape,
                   int axis) {
  SCOPED_TRACE("softmax of " + shape.to_string() + " along " + std::to_string(axis));
  const auto d = static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(shape.rank()) : axis);
  const auto r = ferry::softmax(ferry::to_device(dev, values, shape), axis);
  EXPECT_EQ(r.shape(), shape);
  expect_values<T>(reference_softmax(values, shape, d), r.to_host().data());
}

template <class T>
class Softmax : public ::testing::Test {};
TYPED_TEST_SUITE(Softmax, ferry_test::FloatingTypes);

TYPED_TEST(Softmax, MatchesReferenceLoop) {
  using T = TypeParam;
  struct SoftCase {
    Shape shape;
    int axis;
  };
  const SoftCase all[] = {{Shape{5}, 0},       {Shape{5}, -1},         {Shape{3, 4}, 0},
                          {Shape{3, 4}, 1},    {Shape{3, 4}, -2},      {Shape{2, 3, 4}, 1},
                          {Shape{2, 1, 3}, 1}, {Shape{2, 3, 4, 5}, 2}, {Shape{1}, 0},
                          {Shape{2, 0, 3}, 1}, {Shape{2, 0, 3}, 0},    {Shape{4, 300}, 1}};
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 1;
    for (const SoftCase& c : all) {
      const auto n = static_cast<std::size_t>(c.shape.numel());
      check_softmax(dev, random_values<T>(n, seed), c.shape, c.axis);
      // Scaled to +-400: e^400 overflows float and bfloat16, so only a shifted softmax passes.
      std::vector<T> wide = random_values<T>(n, seed + 50);
      for (T& x : wide) x = T(static_cast<float>(x) * 100.0f);
      check_softmax(dev, wide, c.shape, c.axis);
      ++seed;
    }
  });
}

TYPED_TEST(Softmax, LargeInputsDoNotOverflow) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    // 1000 and 992 are exact in every floating type; e^1000 overflows even double.
    const auto a = ferry::to_device(
        dev,
        std::vector<T>{T(1000.0f), T(1000.0f), T(992.0f), T(-1000.0f), T(-1000.0f), T(-992.0f)},
        Shape{2, 3});
    const std::vector<double> got = doubles<T>(ferry::softmax(a, 1).to_host().data());
    const double e8 = std::exp(-8.0);
    expect_values<T>({1 / (2 + e8), 1 / (2 + e8), e8 / (2 + e8), e8 / (2 * e8 + 1),
                      e8 / (2 * e8 + 1), 1 / (2 * e8 + 1)},
                     ferry::softmax(a, 1).to_host().data());
    for (double x : got) EXPECT_TRUE(std::isfinite(x));
    const auto b = ferry::to_device(dev, std::vector<T>{T(1000.0f), T(-1000.0f)}, Shape{2});
    expect_values<T>({1.0, 0.0}, ferry::softmax(b, 0).to_host().data());
  });
}

TYPED_TEST(Softmax, SlicesSumToOne) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    // Along the last axis and along a strided middle axis.
    const Shape shape{4, 9, 3};
    const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 17);
    const auto a = ferry::to_device(dev, v, shape);
    const auto [h2, h1] = ferry::to_host(ferry::softmax(a, 2), ferry::softmax(a, 1));
    std::vector<double> sums2(4 * 9, 0.0);
    std::vector<double> sums1(4 * 3, 0.0);
    for (std::int64_t i = 0; i < 4; ++i) {
      for (std::int64_t j = 0; j < 9; ++j) {
        for (std::int64_t k = 0; k < 3; ++k) {
          EXPECT_GT(to_double(h2(i, j, k)), 0.0);
          sums2[static_cast<std::size_t>(i * 9 + j)] += to_double(h2(i, j, k));
          sums1[static_cast<std::size_t>(i * 3 + k)] += to_double(h1(i, j, k));
        }
      }
    }
    for (double s : sums2) EXPECT_NEAR(s, 1.0, ferry_test::tolerance<T>());
    for (double s : sums1) EXPECT_NEAR(s, 1.0, ferry_test::tolerance<T>());
  });
}

// ---- errors, all thrown at the call ----

class ReduceErrors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ReduceErrors);

TEST_P(ReduceErrors, AxisOutOfRange) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 3});
  expect_error<ferry::InvalidArgument>([&] { (void)ferry::sum(a, {2}); },
                                       "[sum] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::sum(a, {-3}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::mean(a, {0, 5}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::max(a, {-3}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::min(a, {2}, true), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::sum(ferry::zeros<std::int32_t>(dev, Shape{}), {0}),
               ferry::InvalidArgument);
  expect_error<ferry::InvalidArgument>([&] { (void)ferry::argmax(a, 2); },
                                       "[argmax] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::argmax(a, -3), ferry::InvalidArgument);
  // A scalar has no axis to take the argmax along.
  EXPECT_THROW((void)ferry::argmax(ferry::zeros<float>(dev, Shape{}), 0), ferry::InvalidArgument);
  expect_error<ferry::InvalidArgument>([&] { (void)ferry::softmax(a, 2); },
                                       "[softmax] axis 2 is out of range for rank 2");
  EXPECT_THROW((void)ferry::softmax(a, -3), ferry::InvalidArgument);
}

TEST_P(ReduceErrors, RepeatedAxis) {
  const auto a = ferry::zeros<double>(dev, Shape{2, 3, 4});
  expect_error<ferry::InvalidArgument>(
      [&] {
        (void)ferry::sum(a, {0, 0});
      },
      "[sum] axis 0 is given twice");
  // -1 and 2 name the same dimension.
  expect_error<ferry::InvalidArgument>(
      [&] {
        (void)ferry::max(a, {2, -1});
      },
      "[max] axis -1 is given twice");
  EXPECT_THROW((void)ferry::min(a, {1, 0, 1}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::mean(a, {-3, 0}, true), ferry::InvalidArgument);
}

TEST_P(ReduceErrors, EmptyAxisHasNoMaximum) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 0, 3});
  expect_error<ferry::ShapeError>(
      [&] { (void)ferry::max(a, {1}); },
      "[max] cannot reduce the empty axis 1 of (2, 0, 3): the result has no identity");
  EXPECT_THROW((void)ferry::min(a, {1}), ferry::ShapeError);
  EXPECT_THROW((void)ferry::max(a), ferry::ShapeError);  // all axes, the empty one included
  EXPECT_THROW((void)ferry::min(a, {-2, 0}, true), ferry::ShapeError);
  EXPECT_THROW((void)ferry::max(ferry::zeros<std::int64_t>(dev, Shape{0})), ferry::ShapeError);
  const auto b = ferry::zeros<std::int32_t>(dev, Shape{2, 0});
  expect_error<ferry::ShapeError>([&] { (void)ferry::argmax(b, 1); },
                                  "[argmax] axis 1 of (2, 0) is empty");
  EXPECT_THROW((void)ferry::argmax(b, -1, true), ferry::ShapeError);
}

TEST_P(ReduceErrors, EmptyHandles) {
  const ferry::DeviceArray<float> empty;
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::sum(empty); },
      "[sum] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  EXPECT_THROW((void)ferry::mean(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::max(empty, {0}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::min(empty), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::argmax(empty, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::softmax(empty, 0), ferry::InvalidArgument);
}

TEST(ReduceManual, ResultsAreKnownBeforeAnythingRuns) {
  ferry::ManualExecutor manual;
  ferry::Device dev(manual);
  const auto a = ferry::ones<float>(dev, Shape{3, 4, 5});
  const auto s = ferry::sum(a, {0, 2});
  const auto m = ferry::argmax(a, -1, true);
  const auto p = ferry::softmax(a, 1);
  EXPECT_EQ(s.shape(), Shape{4});
  EXPECT_EQ(m.shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(p.shape(), (Shape{3, 4, 5}));
  EXPECT_FALSE(s.ready() || m.ready() || p.ready());
  const auto [hs, hm, hp] = ferry::to_host(s, m, p);
  for (float x : hs.data()) EXPECT_EQ(x, 15.0f);
  for (std::int64_t x : hm.data()) EXPECT_EQ(x, 0);  // all equal: the first index
  for (float x : hp.data()) EXPECT_NEAR(x, 0.25f, 1e-6f);
}

}  // namespace

}  // namespace test_reduce
