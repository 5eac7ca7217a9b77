// The shape ops composed of reshape, permute, broadcast_to and concat (squeeze, unsqueeze,
// swapaxes, stack, reshape with -1, tile, repeat, pad) and flip: each against a reference index
// loop for every element type, odd and empty sizes, on modeled devices of every executor kind
// and on the host CPU device; their errors at the call; their gradients against central
// differences in float64; a program of them replayed for new batch sizes from one trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_shape_extra {

namespace {

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::Shape;
using ferry_test::random_values;
using ferry_test::unravel;

using AllTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, ferry::bfloat16, bool>;

/// Modeled devices on a stepped and a pooled executor, an H100 model and the host CPU device.
template <class F>
void for_each_device(F&& f) {
  {
    SCOPED_TRACE("manual executor");
    f(ferry_test::make_device(0));
  }
  {
    SCOPED_TRACE("2 executor threads");
    f(ferry_test::make_device(2));
  }
  {
    SCOPED_TRACE("h100_sxm model");
    f(ferry::Device::modeled(ferry::specs::h100_sxm()));
  }
  {
    SCOPED_TRACE("cpu");
    f(ferry::Device::cpu());
  }
}

/// Data movement copies bits: compare bfloat16 by its bits, everything else with ==.
template <class T>
bool same(T a, T b) {
  if constexpr (std::is_same_v<T, ferry::bfloat16>)
    return a.bits == b.bits;
  else
    return a == b;
}

template <class T>
void expect_array(const ferry::DeviceArray<T>& a, const Shape& shape,
                  const std::vector<T>& expected) {
  EXPECT_EQ(a.shape(), shape);  // known at the call
  const ferry::HostArray<T> got = a.to_host();
  EXPECT_EQ(got.shape(), shape);
  ASSERT_EQ(got.data().size(), expected.size());
  int failures = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!same<T>(got.data()[i], expected[i]) && failures++ < 3) {
      ADD_FAILURE() << "values differ at flat index " << i;
    }
  }
  EXPECT_EQ(failures, 0);
}

std::int64_t flat_index(const std::vector<std::int64_t>& idx, const Shape& shape) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < shape.rank(); ++d) f = f * shape.dims()[d] + idx[d];
  return f;
}

std::size_t normalized(int axis, std::size_t rank) {
  return static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(rank) : axis);
}

/// Reference gather: out[idx] = in[source(idx)], or `fill` where source gives a negative index.
template <class T>
std::vector<T> reference(const Shape& out_shape, const std::vector<T>& in, const Shape& in_shape,
                         const std::function<bool(std::vector<std::int64_t>&)>& source,
                         T fill = T{}) {
  std::vector<T> out;
  for (std::int64_t f = 0; f < out_shape.numel(); ++f) {
    std::vector<std::int64_t> idx = unravel(f, out_shape);
    if (source(idx)) {
      out.push_back(in[static_cast<std::size_t>(flat_index(idx, in_shape))]);
    } else {
      out.push_back(fill);
    }
  }
  return out;
}

template <class T>
class ShapeExtra : public ::testing::Test {};
TYPED_TEST_SUITE(ShapeExtra, AllTypes);

// ---- squeeze, unsqueeze, swapaxes ----

TYPED_TEST(ShapeExtra, SqueezeAndUnsqueezeKeepTheValues) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(15, 1);
    const auto x = ferry::to_device(dev, v, Shape{1, 3, 1, 5, 1});
    expect_array(ferry::squeeze(x), Shape{3, 5}, v);
    expect_array(ferry::squeeze(x, 0), Shape{3, 1, 5, 1}, v);
    expect_array(ferry::squeeze(x, -1), Shape{1, 3, 1, 5}, v);
    expect_array(ferry::squeeze(x, 2), Shape{1, 3, 5, 1}, v);
    const auto y = ferry::to_device(dev, v, Shape{3, 5});
    expect_array(ferry::unsqueeze(y, 0), Shape{1, 3, 5}, v);
    expect_array(ferry::unsqueeze(y, 1), Shape{3, 1, 5}, v);
    expect_array(ferry::unsqueeze(y, 2), Shape{3, 5, 1}, v);
    expect_array(ferry::unsqueeze(y, -1), Shape{3, 5, 1}, v);
    expect_array(ferry::unsqueeze(y, -3), Shape{1, 3, 5}, v);
    // Scalars, all-ones and empty arrays.
    const std::vector<T> one = random_values<T>(1, 2);
    const auto s = ferry::to_device(dev, one, Shape{});
    expect_array(ferry::unsqueeze(s, 0), Shape{1}, one);
    expect_array(ferry::squeeze(ferry::to_device(dev, one, Shape{1, 1, 1})), Shape{}, one);
    expect_array(ferry::squeeze(s), Shape{}, one);
    const auto e = ferry::to_device(dev, std::vector<T>{}, Shape{0, 1, 3});
    expect_array(ferry::squeeze(e), Shape{0, 3}, std::vector<T>{});
    expect_array(ferry::unsqueeze(e, 3), Shape{0, 1, 3, 1}, std::vector<T>{});
  });
}

TYPED_TEST(ShapeExtra, SwapaxesMatchesAReferenceLoop) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    for (const auto& [shape, a1, a2] :
         {std::tuple{Shape{3, 5}, 0, 1}, std::tuple{Shape{2, 3, 5}, 0, 2},
          std::tuple{Shape{2, 3, 5}, -1, 1}, std::tuple{Shape{3, 0, 2}, 0, 1},
          std::tuple{Shape{3, 5}, 1, -1}}) {
      SCOPED_TRACE(shape.to_string() + " " + std::to_string(a1) + " " + std::to_string(a2));
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 3);
      const std::size_t d1 = normalized(a1, shape.rank());
      const std::size_t d2 = normalized(a2, shape.rank());
      std::vector<std::int64_t> dims(shape.begin(), shape.end());
      std::swap(dims[d1], dims[d2]);
      const Shape out{std::span<const std::int64_t>(dims)};
      const auto want = reference<T>(out, v, shape, [&](std::vector<std::int64_t>& idx) {
        std::swap(idx[d1], idx[d2]);
        return true;
      });
      expect_array(ferry::swapaxes(ferry::to_device(dev, v, shape), a1, a2), out, want);
    }
  });
}

// ---- stack ----

TYPED_TEST(ShapeExtra, StackMatchesAReferenceLoop) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    for (const Shape& shape : {Shape{3, 5}, Shape{}, Shape{2, 0}, Shape{7}}) {
      for (int n : {1, 3}) {
        std::vector<std::vector<T>> values;
        std::vector<ferry::DeviceArray<T>> arrays;
        for (int i = 0; i < n; ++i) {
          values.push_back(random_values<T>(static_cast<std::size_t>(shape.numel()),
                                            static_cast<unsigned>(10 + i)));
          arrays.push_back(ferry::to_device(dev, values.back(), shape));
        }
        const int rank = static_cast<int>(shape.rank());
        for (int axis = -rank - 1; axis <= rank; ++axis) {
          SCOPED_TRACE(shape.to_string() + " x" + std::to_string(n) + " axis " +
                       std::to_string(axis));
          const std::size_t d = normalized(axis, shape.rank() + 1);
          std::vector<std::int64_t> dims(shape.begin(), shape.end());
          dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(d), n);
          const Shape out{std::span<const std::int64_t>(dims)};
          std::vector<T> want;
          for (std::int64_t f = 0; f < out.numel(); ++f) {
            std::vector<std::int64_t> idx = unravel(f, out);
            const auto which = static_cast<std::size_t>(idx[d]);
            idx.erase(idx.begin() + static_cast<std::ptrdiff_t>(d));
            want.push_back(values[which][static_cast<std::size_t>(flat_index(idx, shape))]);
          }
          expect_array(ferry::stack(arrays, axis), out, want);
        }
      }
    }
    // The braced list.
    const std::vector<T> a = random_values<T>(3, 20);
    const std::vector<T> b = random_values<T>(3, 21);
    std::vector<T> ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    expect_array(
        ferry::stack({ferry::to_device(dev, a, Shape{3}), ferry::to_device(dev, b, Shape{3})}, 0),
        Shape{2, 3}, ab);
  });
}

// ---- reshape with -1 ----

TYPED_TEST(ShapeExtra, ReshapeInfersTheMinusOneSize) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(60, 4);
    const auto x = ferry::to_device(dev, v, Shape{3, 4, 5});
    expect_array(ferry::reshape(x, {-1, 4}), Shape{15, 4}, v);
    expect_array(ferry::reshape(x, {5, -1}), Shape{5, 12}, v);
    expect_array(ferry::reshape(x, {-1}), Shape{60}, v);
    expect_array(ferry::reshape(x, {2, -1, 3, 1}), Shape{2, 10, 3, 1}, v);
    expect_array(ferry::reshape(x, std::vector<ferry::SymInt>{3, -1}), Shape{3, 20}, v);
    // Without -1 it is the plain reshape.
    expect_array(ferry::reshape(x, {6, 10}), Shape{6, 10}, v);
    // An empty array: -1 takes the count 0 over the other (non-zero) sizes.
    const auto e = ferry::to_device(dev, std::vector<T>{}, Shape{0, 6});
    expect_array(ferry::reshape(e, {-1, 3}), Shape{0, 3}, std::vector<T>{});
    expect_array(ferry::reshape(e, {4, -1, 2}), Shape{4, 0, 2}, std::vector<T>{});
    const std::vector<T> one = random_values<T>(1, 5);
    expect_array(ferry::reshape(ferry::to_device(dev, one, Shape{}), {-1}), Shape{1}, one);
  });
}

// ---- flip ----

TYPED_TEST(ShapeExtra, FlipMatchesAReferenceLoop) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const std::vector<std::pair<Shape, std::vector<int>>> cases = {
        {Shape{7}, {0}},          {Shape{3, 5}, {0}},     {Shape{3, 5}, {1}},
        {Shape{3, 5}, {0, 1}},    {Shape{3, 5}, {-1, 0}}, {Shape{2, 3, 5}, {1}},
        {Shape{2, 3, 5}, {0, 2}}, {Shape{2, 1, 5}, {1}},  {Shape{3, 0, 2}, {0, 1}},
        {Shape{1, 1}, {0, 1}}};
    for (const auto& c : cases) {
      const Shape& shape = c.first;  // a named copy: clang 14 lambdas cannot capture bindings
      const std::vector<int>& axes = c.second;
      SCOPED_TRACE(shape.to_string() + " axes " + std::to_string(axes.front()));
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 6);
      std::vector<bool> flipped(shape.rank());
      for (int a : axes) flipped[normalized(a, shape.rank())] = true;
      const auto want = reference<T>(shape, v, shape, [&](std::vector<std::int64_t>& idx) {
        for (std::size_t d = 0; d < idx.size(); ++d) {
          if (flipped[d]) idx[d] = shape.dims()[d] - 1 - idx[d];
        }
        return true;
      });
      const auto x = ferry::to_device(dev, v, shape);
      expect_array(ferry::flip(x, axes), shape, want);
      if (axes.size() == 1) expect_array(ferry::flip(x, axes.front()), shape, want);
    }
    // Every axis, and no axis at all (the array itself).
    const std::vector<T> v = random_values<T>(15, 7);
    const auto x = ferry::to_device(dev, v, Shape{3, 5});
    expect_array(ferry::flip(x), Shape{3, 5}, std::vector<T>(v.rbegin(), v.rend()));
    expect_array(ferry::flip(x, std::vector<int>{}), Shape{3, 5}, v);
    expect_array(ferry::flip(x, {}), Shape{3, 5}, v);  // no axis, not axis 0
    expect_array(ferry::flip(x, {0, 1}), Shape{3, 5}, std::vector<T>(v.rbegin(), v.rend()));
    // A flip of a flip is the source again.
    expect_array(ferry::flip(ferry::flip(x, 1), 1), Shape{3, 5}, v);
  });
}

TYPED_TEST(ShapeExtra, OpsOnATiledInputReadItInRowMajorOrder) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const ferry::Layout tiled{ferry::MemorySpace::dram, ferry::Order::tiled};
    const Shape shape{3, 37};  // one tile row, a ragged tile column
    const std::vector<T> v = random_values<T>(111, 13);
    const auto x = ferry::to_device(dev, v, shape, tiled);
    const auto flipped = reference<T>(shape, v, shape, [&](std::vector<std::int64_t>& idx) {
      idx[1] = 36 - idx[1];
      return true;
    });
    expect_array(ferry::flip(x, 1), shape, flipped);
    std::vector<T> twice = v;
    twice.insert(twice.end(), v.begin(), v.end());
    expect_array(ferry::stack({x, x}, 0), Shape{2, 3, 37}, twice);
    expect_array(ferry::reshape(x, {-1, 3}), Shape{37, 3}, v);
    expect_array(ferry::squeeze(ferry::unsqueeze(x, 1)), shape, v);
  });
}

// ---- pad ----

TYPED_TEST(ShapeExtra, PadMatchesAReferenceLoop) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const T value = random_values<T>(1, 99).front();
    using Widths = std::vector<std::pair<ferry::SymInt, ferry::SymInt>>;
    const std::vector<std::pair<Shape, Widths>> cases = {{Shape{5}, {{2, 3}}},
                                                         {Shape{3, 5}, {{1, 0}, {0, 2}}},
                                                         {Shape{3, 5}, {{0, 0}, {3, 1}}},
                                                         {Shape{2, 3, 1}, {{1, 1}, {0, 0}, {2, 2}}},
                                                         {Shape{0, 3}, {{1, 2}, {1, 0}}},
                                                         {Shape{3, 0}, {{0, 0}, {0, 0}}},
                                                         {Shape{}, {}}};
    for (const auto& c : cases) {
      const Shape& shape = c.first;  // a named copy: clang 14 lambdas cannot capture bindings
      const Widths& widths = c.second;
      SCOPED_TRACE(shape.to_string());
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 8);
      std::vector<std::int64_t> dims;
      std::vector<std::int64_t> before;
      for (std::size_t d = 0; d < shape.rank(); ++d) {
        const auto b = static_cast<std::int64_t>(widths[d].first);
        const auto a = static_cast<std::int64_t>(widths[d].second);
        dims.push_back(b + shape.dims()[d] + a);
        before.push_back(b);
      }
      const Shape out{std::span<const std::int64_t>(dims)};
      const auto want = reference<T>(
          out, v, shape,
          [&](std::vector<std::int64_t>& idx) {
            for (std::size_t d = 0; d < idx.size(); ++d) {
              idx[d] -= before[d];
              if (idx[d] < 0 || idx[d] >= shape.dims()[d]) return false;
            }
            return true;
          },
          value);
      const auto x = ferry::to_device(dev, v, shape);
      expect_array(ferry::pad(x, widths, value), out, want);
    }
    // The default value is zero (false), and a braced list of widths.
    const std::vector<T> v = random_values<T>(2, 9);
    expect_array(ferry::pad(ferry::to_device(dev, v, Shape{2}), {{1, 1}}), Shape{4},
                 std::vector<T>{T{}, v[0], v[1], T{}});
  });
}

// ---- tile and repeat ----

TYPED_TEST(ShapeExtra, TileMatchesNumPy) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const std::vector<std::pair<Shape, std::vector<std::int64_t>>> cases = {
        {Shape{3}, {2}},       {Shape{3, 5}, {2, 1}}, {Shape{3, 5}, {1, 3}}, {Shape{2, 3}, {3, 2}},
        {Shape{2, 3}, {2}},                     // reps shorter than the rank
        {Shape{3}, {2, 1, 2}}, {Shape{}, {3}},  // reps longer than the rank
        {Shape{2, 3}, {0, 2}}, {Shape{0, 3}, {2, 2}}, {Shape{2, 3}, {1, 1}}, {Shape{2, 3}, {}}};
    for (const auto& [shape, reps] : cases) {
      SCOPED_TRACE(shape.to_string() + " reps " + std::to_string(reps.size()));
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 11);
      const std::size_t rank = std::max(shape.rank(), reps.size());
      std::vector<std::int64_t> in_dims(rank - shape.rank(), 1);
      in_dims.insert(in_dims.end(), shape.begin(), shape.end());
      std::vector<std::int64_t> count(rank - reps.size(), 1);
      count.insert(count.end(), reps.begin(), reps.end());
      std::vector<std::int64_t> out_dims;
      for (std::size_t d = 0; d < rank; ++d) out_dims.push_back(in_dims[d] * count[d]);
      const Shape in_shape{std::span<const std::int64_t>(in_dims)};
      const Shape out{std::span<const std::int64_t>(out_dims)};
      const auto want = reference<T>(out, v, in_shape, [&](std::vector<std::int64_t>& idx) {
        for (std::size_t d = 0; d < rank; ++d) idx[d] %= in_dims[d];
        return true;
      });
      expect_array(ferry::tile(ferry::to_device(dev, v, shape), reps), out, want);
    }
  });
}

TYPED_TEST(ShapeExtra, RepeatMatchesNumPy) {
  using T = TypeParam;
  for_each_device([](const ferry::Device& dev) {
    const std::vector<std::tuple<Shape, std::int64_t, int>> cases = {
        {Shape{5}, 3, 0},       {Shape{3, 5}, 2, 0}, {Shape{3, 5}, 2, 1}, {Shape{3, 5}, 3, -1},
        {Shape{2, 3, 5}, 2, 1}, {Shape{3, 5}, 0, 1}, {Shape{0, 5}, 4, 0}, {Shape{3, 5}, 1, 0}};
    for (const auto& c : cases) {
      const auto& [shape, count, axis] = c;
      const std::int64_t r = count;  // a named copy: clang 14 lambdas cannot capture bindings
      SCOPED_TRACE(shape.to_string() + " x" + std::to_string(r) + " axis " + std::to_string(axis));
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 12);
      const std::size_t d = normalized(axis, shape.rank());
      std::vector<std::int64_t> dims(shape.begin(), shape.end());
      dims[d] *= r;
      const Shape out{std::span<const std::int64_t>(dims)};
      const auto want = reference<T>(out, v, shape, [&](std::vector<std::int64_t>& idx) {
        idx[d] /= r;
        return true;
      });
      expect_array(ferry::repeat(ferry::to_device(dev, v, shape), r, axis), out, want);
    }
  });
}

// ---- errors, at the call ----

TEST(ShapeExtraErrors, EachOpNamesItselfAndTheValues) {
  const ferry::Device dev = ferry_test::make_device(0);
  const auto x = ferry::to_device(dev, std::vector<float>(6, 1.f), Shape{2, 3});
  const auto y = ferry::to_device(dev, std::vector<float>(8, 1.f), Shape{2, 4});
  const auto odd = ferry::to_device(dev, std::vector<float>(15, 1.f), Shape{5, 3});
  const auto empty = ferry::to_device(dev, std::vector<float>{}, Shape{0, 3});
  const auto s = ferry::to_device(dev, std::vector<float>{1.f}, Shape{});

  expect_error<ferry::ShapeError>([&] { ferry::squeeze(x, 1); },
                                  "[squeeze] axis 1 of (2, 3) has size 3, not 1");
  EXPECT_THROW(ferry::squeeze(x, -2), ferry::ShapeError);
  expect_error<ferry::InvalidArgument>([&] { ferry::squeeze(x, 2); },
                                       "[squeeze] axis 2 is out of range for rank 2");
  expect_error<ferry::InvalidArgument>([&] { ferry::unsqueeze(x, 3); },
                                       "[unsqueeze] axis 3 is out of range for rank 3");
  EXPECT_THROW(ferry::unsqueeze(x, -4), ferry::InvalidArgument);
  const auto rank8 = ferry::to_device(dev, std::vector<float>{1.f}, Shape{1, 1, 1, 1, 1, 1, 1, 1});
  expect_error<ferry::InvalidArgument>(
      [&] { ferry::unsqueeze(rank8, 0); },
      "[unsqueeze] cannot add a dimension to (1, 1, 1, 1, 1, 1, 1, 1): rank 8 is the maximum");
  expect_error<ferry::InvalidArgument>([&] { ferry::swapaxes(x, 0, 2); },
                                       "[swapaxes] axis 2 is out of range for rank 2");

  expect_error<ferry::ShapeError>(
      [&] {
        ferry::stack({x, y}, 0);
      },
      "[stack] array 1 has shape (2, 4), array 0 has (2, 3)");
  expect_error<ferry::InvalidArgument>(
      [&] { ferry::stack(std::vector<ferry::DeviceArray<float>>{}, 0); },
      "[stack] needs at least one array");
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::stack({x, x}, 3);
      },
      "[stack] axis 3 is out of range for rank 3");
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::stack({x, ferry::DeviceArray<float>{}}, 0);
      },
      "[stack] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  const auto other =
      ferry::to_device(ferry_test::make_device(0), std::vector<float>(6, 1.f), Shape{2, 3});
  EXPECT_THROW(ferry::stack({x, other}, 0), ferry::DeviceMismatch);

  expect_error<ferry::ShapeError>(
      [&] {
        ferry::reshape(odd, {-1, 4});
      },
      "[reshape] cannot reshape (5, 3) of 15 elements into (-1, 4)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::reshape(odd, {-1, -1});
      },
      "[reshape] more than one -1 in (-1, -1)");
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::reshape(odd, {-1, -3});
      },
      "[reshape] negative size -3 in dimension 1 of (-1, -3)");
  expect_error<ferry::ShapeError>(
      [&] {
        ferry::reshape(empty, {0, -1});
      },
      "[reshape] cannot reshape (0, 3) of 0 elements into (0, -1): -1 is ambiguous next to a "
      "zero size");
  EXPECT_THROW(ferry::reshape(odd, {4, 4}), ferry::ShapeError);  // no -1: the plain check

  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::flip(x, std::vector<int>{1, -1});
      },
      "[flip] axis -1 is given twice");
  expect_error<ferry::InvalidArgument>([&] { ferry::flip(x, 2); },
                                       "[flip] axis 2 is out of range for rank 2");

  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::pad(x, {{1, 1}});
      },
      "[pad] 1 width pairs given for (2, 3) of rank 2");
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::pad(x, {{-1, 0}, {0, 0}});
      },
      "[pad] negative width (-1, 0) for axis 0 of (2, 3)");

  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::tile(x, {-1, 2});
      },
      "[tile] negative count -1 for axis 0");
  expect_error<ferry::InvalidArgument>([&] { ferry::tile(x, std::vector<std::int64_t>(9, 1)); },
                                       "[tile] 9 counts exceed the maximum rank 8");
  expect_error<ferry::InvalidArgument>([&] { ferry::repeat(x, -2, 0); },
                                       "[repeat] negative count -2");
  expect_error<ferry::InvalidArgument>([&] { ferry::repeat(s, 2, 0); },
                                       "[repeat] axis 0 is out of range for rank 0");
  // Each size fits, the element count does not: refused before any step, naming the op.
  const std::int64_t huge = std::int64_t{1} << 62;
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::tile(x, {huge / 2, 4});
      },
      "[tile] the result's element count overflows int64");
  expect_error<ferry::InvalidArgument>([&] { ferry::repeat(x, huge / 2, 0); },
                                       "[repeat] the result's element count overflows int64");
  expect_error<ferry::InvalidArgument>(
      [&] {
        ferry::pad(x, {{huge, 0}, {0, 0}});
      },
      "[pad] padding (2, 3) overflows the element count");
  const auto big = ferry::to_device(dev, std::vector<float>{}, Shape{0, std::int64_t{1} << 40});
  EXPECT_THROW(ferry::repeat(big, std::int64_t{1} << 40, 1), ferry::InvalidArgument);
}

// ---- gradients against central differences ----

using D = ferry::DeviceArray<double>;

std::vector<double> host(const D& a) {
  const auto h = a.to_host();
  return {h.data().begin(), h.data().end()};
}

/// sum(y * w) with w a fixed weight per element, so each element gets its own cotangent.
D weighed(const D& y) {
  std::vector<double> w(static_cast<std::size_t>(y.shape().numel()));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + 0.25 * static_cast<double>(i % 7);
  return ferry::sum(y * ferry::to_device(y.device(), w, y.shape()));
}

/// The gradient of weighed(op(x)) at random x of `shape` against central differences.
void check_gradient(const ferry::Device& dev, const Shape& shape,
                    const std::function<D(const D&)>& op) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> x(static_cast<std::size_t>(shape.numel()));
  for (double& e : x) e = u(gen);
  auto f = [&](const D& a) { return weighed(op(a)); };
  const D g = ferry::grad(f)(ferry::to_device(dev, x, shape));
  ASSERT_EQ(g.shape(), shape);
  const std::vector<double> analytic = host(g);
  const double h = 1e-5;
  for (std::size_t e = 0; e < x.size(); ++e) {
    const double keep = x[e];
    x[e] = keep + h;
    const double up = host(f(ferry::to_device(dev, x, shape))).at(0);
    x[e] = keep - h;
    const double down = host(f(ferry::to_device(dev, x, shape))).at(0);
    x[e] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[e], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "element " << e;
  }
}

TEST(ShapeExtraGrad, EveryOpMatchesCentralDifferences) {
  for_each_device([](const ferry::Device& dev) {
    check_gradient(dev, Shape{1, 3, 1}, [](const D& a) { return ferry::squeeze(a); });
    check_gradient(dev, Shape{3, 1}, [](const D& a) { return ferry::squeeze(a, 1); });
    check_gradient(dev, Shape{3, 2}, [](const D& a) { return ferry::unsqueeze(a, 1); });
    check_gradient(dev, Shape{2, 3, 2}, [](const D& a) { return ferry::swapaxes(a, 0, 2); });
    check_gradient(dev, Shape{3, 2}, [](const D& a) { return ferry::stack({a, a * 2.0, a}, 1); });
    check_gradient(dev, Shape{3, 4}, [](const D& a) { return ferry::reshape(a, {-1, 6}); });
    check_gradient(dev, Shape{3, 4}, [](const D& a) { return ferry::flip(a, 1); });
    check_gradient(dev, Shape{2, 3, 2}, [](const D& a) {
      return ferry::flip(a, std::vector<int>{0, 2});
    });
    check_gradient(dev, Shape{2, 3}, [](const D& a) {
      return ferry::pad(a, {{1, 2}, {0, 1}}, 3.0);
    });
    check_gradient(dev, Shape{2, 3}, [](const D& a) { return ferry::tile(a, {2, 1, 3}); });
    check_gradient(dev, Shape{2, 3}, [](const D& a) { return ferry::repeat(a, 3, 1); });
    check_gradient(dev, Shape{2, 3}, [](const D& a) { return ferry::repeat(a, 2, 0); });
    // Empty inputs have empty gradients.
    check_gradient(dev, Shape{0, 3}, [](const D& a) {
      return ferry::tile(ferry::flip(a, 0), {2, 2});
    });
  });
}

// ---- one trace for many batch sizes ----

/// A batch of rows through reshape -1, stack, tile, repeat, flip, pad, squeeze and swapaxes.
D pipeline(const D& x) {
  const D rows = ferry::reshape(x, {-1, 3});           // (2b, 3)
  const D pair = ferry::stack({rows, rows * 2.0}, 1);  // (2b, 2, 3)
  const D tiled = ferry::tile(pair, {1, 2, 1});        // (2b, 4, 3)
  const D twice = ferry::repeat(tiled, 2, 0);          // (4b, 4, 3)
  const D back = ferry::flip(twice, std::vector<int>{0, 2});
  const D padded = ferry::pad(back, {{1, 0}, {0, 0}, {0, 2}}, -1.0);          // (4b + 1, 4, 5)
  return ferry::swapaxes(ferry::squeeze(ferry::unsqueeze(padded, 1)), 0, 2);  // (5, 4, 4b + 1)
}

TEST(ShapeExtraJit, OneTraceServesEveryBatchSize) {
  for_each_device([](const ferry::Device& dev) {
    auto program = ferry::jit([](D x) { return pipeline(x); });
    for (std::int64_t batch : {2, 5, 3}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      std::vector<double> v(static_cast<std::size_t>(batch * 6));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 0.5 - 3;
      const D x = ferry::to_device(dev, v, Shape{batch, 6});
      const D got = program(x);
      const D want = pipeline(x);
      EXPECT_EQ(got.shape(), (Shape{5, 4, 4 * batch + 1}));
      EXPECT_EQ(host(got), host(want));
    }
    EXPECT_EQ(program.cache_size(), 1u);
    EXPECT_EQ(program.cache_hits(), 2u);
  });
}

TEST(ShapeExtraJit, SymbolicPadWidthsFollowTheBatch) {
  const ferry::Device dev = ferry::Device::modeled(ferry::specs::h100_sxm());
  // Pads each batch of rows by as many rows of -1 as it has, then stacks it with its flip.
  auto f = [](const D& x) {
    const D p = ferry::pad(
        x, {{ferry::SymInt(0), x.shape()[0]}, {ferry::SymInt(1), ferry::SymInt(0)}}, -1.0);
    return ferry::stack({p, ferry::flip(p, 0)}, -1);
  };
  auto program = ferry::jit([&](D x) { return f(x); });
  for (std::int64_t batch : {2, 4, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    std::vector<double> v(static_cast<std::size_t>(batch * 2));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
    const D x = ferry::to_device(dev, v, Shape{batch, 2});
    const D got = program(x);
    EXPECT_EQ(got.shape(), (Shape{2 * batch, 3, 2}));
    EXPECT_EQ(host(got), host(f(x)));
  }
  EXPECT_EQ(program.cache_size(), 1u);
  EXPECT_EQ(program.cache_hits(), 2u);
}

TEST(ShapeExtraJit, AnInferredSizeThatStopsDividingRetracesAndFails) {
  const ferry::Device dev = ferry_test::make_device(0);
  auto program = ferry::jit([](D x) { return ferry::reshape(x, {-1, 2}); });
  for (std::int64_t batch : {2, 4}) {
    const D x = ferry::to_device(dev, std::vector<double>(static_cast<std::size_t>(batch * 3), 1.0),
                                 Shape{batch, 3});
    EXPECT_EQ(program(x).shape(), (Shape{batch * 3 / 2, 2}));
  }
  EXPECT_EQ(program.cache_size(), 1u);
  EXPECT_EQ(program.cache_hits(), 1u);
  const D bad = ferry::to_device(dev, std::vector<double>(9, 1.0), Shape{3, 3});
  EXPECT_THROW(program(bad), ferry::ShapeError);
}

TEST(ShapeExtraJit, ATracedGradientOfTheOpsReplaysForNewSizes) {
  const ferry::Device dev = ferry_test::make_device(2);
  // No host constants inside a trace (an import would refuse it): sum(y * y) weighs each
  // element by itself.
  auto loss = [](const D& x) {
    const D y = ferry::pad(ferry::flip(ferry::tile(ferry::reshape(x, {-1, 2}), {1, 2}), 0),
                           {{0, 1}, {1, 0}});
    return ferry::sum(y * y);
  };
  auto step = ferry::jit([&](D x) {
    auto [v, g] = ferry::value_and_grad(loss)(x);
    return std::tuple{v, g};
  });
  for (std::int64_t batch : {2, 3, 5}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    std::vector<double> v(static_cast<std::size_t>(batch * 4));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));
    const D x = ferry::to_device(dev, v, Shape{batch, 4});
    auto [value, g] = step(x);
    EXPECT_EQ(host(value), host(loss(x)));
    EXPECT_EQ(host(g), host(ferry::grad(loss)(x)));
  }
  EXPECT_EQ(step.cache_size(), 1u);
  EXPECT_EQ(step.cache_hits(), 2u);
}

}  // namespace

}  // namespace test_shape_extra
