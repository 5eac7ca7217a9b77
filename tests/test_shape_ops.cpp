// Shape and data-movement ops for every element type, bool included: reshape (a view that
// never copies and never chains), transpose, permute, slice, concat and split, each against
// reference index loops, with their errors at the call.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/errors.hpp"
#include "support/devices.hpp"
#include "support/reference.hpp"

namespace test_shape_ops {

namespace {

using ferry_test::expect_error;
using ferry_test::message_of;

using ferry::Shape;
using ferry_test::for_each_executor;
using ferry_test::OnEachExecutor;
using ferry_test::random_values;
using ferry_test::unravel;

using AllTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, ferry::bfloat16, bool>;

/// Data movement copies bits: compare bfloat16 by its bits, everything else with ==.
template <class T>
bool same(T a, T b) {
  if constexpr (std::is_same_v<T, ferry::bfloat16>)
    return a.bits == b.bits;
  else
    return a == b;
}

template <class T>
void expect_array(const ferry::HostArray<T>& got, const Shape& shape,
                  const std::vector<T>& expected) {
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

/// Reference permute: out[i_0, ..., i_{r-1}] = in[j] with j[axes[d]] = i_d.
template <class T>
std::vector<T> reference_permute(const std::vector<T>& in, const Shape& shape,
                                 const std::vector<std::size_t>& axes, Shape* out_shape) {
  std::vector<std::int64_t> dims;
  for (std::size_t a : axes) dims.push_back(shape.dims()[a]);
  *out_shape = Shape(std::span<const std::int64_t>(dims));
  std::vector<T> out;
  for (std::int64_t f = 0; f < out_shape->numel(); ++f) {
    const std::vector<std::int64_t> oi = unravel(f, *out_shape);
    std::vector<std::int64_t> ii(shape.rank());
    for (std::size_t d = 0; d < axes.size(); ++d) ii[axes[d]] = oi[d];
    out.push_back(in[static_cast<std::size_t>(flat_index(ii, shape))]);
  }
  return out;
}

/// Reference slice: the elements whose index along `axis` lies in [begin, end).
template <class T>
std::vector<T> reference_slice(const std::vector<T>& in, const Shape& shape, std::size_t axis,
                               std::int64_t begin, std::int64_t end) {
  std::vector<T> out;
  for (std::int64_t f = 0; f < shape.numel(); ++f) {
    const std::int64_t i = unravel(f, shape)[axis];
    if (i >= begin && i < end) out.push_back(in[static_cast<std::size_t>(f)]);
  }
  return out;
}

/// Reference concat: walks the output; each index along `axis` picks its part.
template <class T>
std::vector<T> reference_concat(const std::vector<std::vector<T>>& parts,
                                const std::vector<Shape>& shapes, std::size_t axis,
                                const Shape& out_shape) {
  std::vector<T> out;
  for (std::int64_t f = 0; f < out_shape.numel(); ++f) {
    std::vector<std::int64_t> idx = unravel(f, out_shape);
    std::size_t p = 0;
    while (idx[axis] >= shapes[p].dims()[axis]) idx[axis] -= shapes[p++].dims()[axis];
    out.push_back(parts[p][static_cast<std::size_t>(flat_index(idx, shapes[p]))]);
  }
  return out;
}

std::size_t normalized(int axis, std::size_t rank) {
  return static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(rank) : axis);
}

/// White box: the step behind a handle, to prove a reshape borrows its source's bytes.
template <class T>
const ferry::detail::Step& step(const ferry::DeviceArray<T>& a) {
  return *ferry::detail::ArrayAccess::step(a);
}

template <class T>
class ShapeOps : public ::testing::Test {};
TYPED_TEST_SUITE(ShapeOps, AllTypes);

// ---- reshape ----

TYPED_TEST(ShapeOps, ReshapeKeepsRowMajorOrder) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(24, 1);
    const auto x = ferry::to_device(dev, v, Shape{2, 3, 4});
    for (const Shape& s :
         {Shape{4, 6}, Shape{24}, Shape{1, 24, 1}, Shape{2, 2, 2, 3}, Shape{2, 3, 4}}) {
      const auto r = ferry::reshape(x, s);
      EXPECT_EQ(r.shape(), s);
      expect_array(r.to_host(), s, v);
    }
    // A reshape of a reshape, and scalars and empty arrays.
    expect_array(ferry::reshape(ferry::reshape(x, {6, 4}), {3, 8}).to_host(), Shape{3, 8}, v);
    const std::vector<T> one = random_values<T>(1, 2);
    const auto s = ferry::to_device(dev, one, Shape{});
    expect_array(ferry::reshape(s, {1, 1, 1}).to_host(), Shape{1, 1, 1}, one);
    expect_array(ferry::reshape(ferry::reshape(s, {1}), Shape{}).to_host(), Shape{}, one);
    const auto e = ferry::to_device(dev, std::vector<T>{}, Shape{0, 3});
    expect_array(ferry::reshape(e, {3, 0, 5}).to_host(), Shape{3, 0, 5}, std::vector<T>{});
  });
}

TYPED_TEST(ShapeOps, ReshapeBorrowsTheSourceBuffer) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(12, 3);
    const auto x = ferry::to_device(dev, v, Shape{3, 4});
    const auto r1 = ferry::reshape(x, {4, 3});
    const auto r2 = ferry::reshape(r1, {2, 6});
    ferry::wait(x, r1, r2);
    // Same bytes, not equal copies: the views' outputs point into the import's buffer.
    EXPECT_EQ(step(r1).output().data(), step(x).output().data());
    EXPECT_EQ(step(r2).output().data(), step(x).output().data());
    // A view of a view views the source: no chain forms.
    ASSERT_EQ(step(r2).input_count(), 1u);
    EXPECT_EQ(&step(r2).input(0), &step(x));
    // Reshaping to the same shape is the same array.
    EXPECT_EQ(&step(ferry::reshape(x, {3, 4})), &step(x));
    expect_array(r2.to_host(), Shape{2, 6}, v);
  });
}

TYPED_TEST(ShapeOps, ReshapeOfAPendingResultOutlivesItsSource) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(6, 4);
    // The source is a computed result nobody else holds; the view keeps it alive until export.
    ferry::DeviceArray<T> r =
        ferry::reshape(ferry::transpose(ferry::to_device(dev, v, Shape{2, 3})), {6});
    r = ferry::reshape(r, {1, 6});
    expect_array(r.to_host(), Shape{1, 6}, std::vector<T>{v[0], v[3], v[1], v[4], v[2], v[5]});
  });
}

// ---- transpose and permute ----

TYPED_TEST(ShapeOps, TransposeReversesTheAxes) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    unsigned seed = 10;
    for (const Shape& s : {Shape{}, Shape{5}, Shape{3, 5}, Shape{2, 3, 4}, Shape{2, 1, 3, 2},
                           Shape{0, 4}, Shape{37, 53}}) {
      SCOPED_TRACE("transpose of " + s.to_string());
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(s.numel()), seed++);
      std::vector<std::size_t> axes;
      for (std::size_t d = s.rank(); d-- > 0;) axes.push_back(d);
      Shape expected_shape;
      const std::vector<T> expected = reference_permute(v, s, axes, &expected_shape);
      const auto t = ferry::transpose(ferry::to_device(dev, v, s));
      EXPECT_EQ(t.shape(), expected_shape);
      expect_array(t.to_host(), expected_shape, expected);
    }
    // The matrix case written out: [[a, b, c], [d, e, f]] becomes [[a, d], [b, e], [c, f]].
    const std::vector<T> m = random_values<T>(6, 30);
    expect_array(ferry::transpose(ferry::to_device(dev, m, Shape{2, 3})).to_host(), Shape{3, 2},
                 std::vector<T>{m[0], m[3], m[1], m[4], m[2], m[5]});
  });
}

TYPED_TEST(ShapeOps, PermuteReordersTheAxes) {
  using T = TypeParam;
  struct PermCase {
    Shape shape;
    std::vector<int> axes;
  };
  const PermCase all[] = {{Shape{2, 3, 4, 5}, {2, 0, 3, 1}},
                          {Shape{2, 3, 4, 5}, {-1, 0, 1, 2}},
                          {Shape{2, 3, 4, 5}, {0, 1, 3, 2}},
                          {Shape{2, 3, 4, 5}, {1, 0, 2, 3}},
                          {Shape{2, 3, 4}, {0, 1, 2}},
                          {Shape{2, 3, 4}, {-3, -2, -1}},
                          {Shape{3, 1, 2}, {1, 2, 0}},
                          {Shape{2, 0, 3}, {2, 0, 1}},
                          {Shape{7}, {0}},
                          {Shape{}, {}}};
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 40;
    for (const PermCase& c : all) {
      SCOPED_TRACE("permute of " + c.shape.to_string());
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(c.shape.numel()), seed++);
      std::vector<std::size_t> axes;
      for (int a : c.axes) axes.push_back(normalized(a, c.shape.rank()));
      Shape expected_shape;
      const std::vector<T> expected = reference_permute(v, c.shape, axes, &expected_shape);
      const auto p = ferry::permute(ferry::to_device(dev, v, c.shape), c.axes);
      EXPECT_EQ(p.shape(), expected_shape);
      expect_array(p.to_host(), expected_shape, expected);
    }
  });
}

// ---- slice ----

TYPED_TEST(ShapeOps, SliceCountsNegativePositionsFromTheEnd) {
  using T = TypeParam;
  // (begin, end) as given, and the same range counted from the start, on an axis of size 5.
  struct Case {
    std::int64_t begin, end, from, to;
  };
  const Case all[] = {{-1, 5, 4, 5}, {1, -1, 1, 4},  {-5, -2, 0, 3},
                      {-3, -3, 2, 2}, {0, -5, 0, 0}, {-2, 5, 3, 5}};
  const Shape shape{3, 5, 2};
  for_each_executor([&](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(static_cast<std::size_t>(shape.numel()), 7);
    const auto x = ferry::to_device(dev, v, shape);
    for (const Case& c : all) {
      SCOPED_TRACE("[" + std::to_string(c.begin) + ", " + std::to_string(c.end) + ")");
      const auto s = ferry::slice(x, 1, c.begin, c.end);
      const Shape expected{3, c.to - c.from, 2};
      EXPECT_EQ(s.shape(), expected);
      expect_array(s.to_host(), expected, reference_slice(v, shape, 1, c.from, c.to));
    }
  });
}

TYPED_TEST(ShapeOps, SliceTakesARangeAlongOneAxis) {
  using T = TypeParam;
  struct SliceCase {
    Shape shape;
    int axis;
    std::int64_t begin, end;
  };
  const SliceCase all[] = {
      {Shape{4, 5, 6}, 1, 1, 4}, {Shape{4, 5, 6}, 0, 2, 3},  {Shape{4, 5, 6}, -1, 2, 6},
      {Shape{4, 5, 6}, 2, 0, 1}, {Shape{4, 5, 6}, -3, 0, 4},  // the full range
      {Shape{4, 5, 6}, 2, 3, 3}, {Shape{4, 5, 6}, 0, 0, 0},  {Shape{4, 5, 6}, 1, 5, 5},  // empty
      {Shape{9}, 0, 4, 9},       {Shape{1, 7}, -1, 1, 6},    {Shape{0, 4}, 1, 1, 3},
      {Shape{3, 0, 2}, 2, 1, 2}, {Shape{3, 0}, 0, 1, 3}};
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 60;
    for (const SliceCase& c : all) {
      SCOPED_TRACE("slice of " + c.shape.to_string() + " along " + std::to_string(c.axis) + " [" +
                   std::to_string(c.begin) + ", " + std::to_string(c.end) + ")");
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(c.shape.numel()), seed++);
      const std::size_t d = normalized(c.axis, c.shape.rank());
      std::vector<std::int64_t> dims(c.shape.dims().begin(), c.shape.dims().end());
      dims[d] = c.end - c.begin;
      const Shape expected_shape{std::span<const std::int64_t>(dims)};
      const auto s = ferry::slice(ferry::to_device(dev, v, c.shape), c.axis, c.begin, c.end);
      EXPECT_EQ(s.shape(), expected_shape);
      expect_array(s.to_host(), expected_shape, reference_slice(v, c.shape, d, c.begin, c.end));
    }
  });
}

// ---- concat ----

TYPED_TEST(ShapeOps, ConcatJoinsAlongOneAxis) {
  using T = TypeParam;
  struct ConcatCase {
    std::vector<Shape> shapes;
    int axis;
  };
  const ConcatCase all[] = {
      {{Shape{2, 3}, Shape{4, 3}}, 0},
      {{Shape{2, 3}, Shape{2, 1}, Shape{2, 5}}, 1},
      {{Shape{2, 3, 4}, Shape{2, 2, 4}, Shape{2, 1, 4}}, -2},
      {{Shape{2, 3, 4}, Shape{2, 3, 1}}, -1},
      {{Shape{2, 0, 4}, Shape{2, 3, 4}, Shape{2, 0, 4}}, 1},  // empty parts
      {{Shape{0, 3}, Shape{0, 3}}, 0},
      {{Shape{0, 3}, Shape{0, 2}}, 1},
      {{Shape{5}, Shape{0}, Shape{2}}, 0},
      {{Shape{3, 2}}, 1},
  };
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 80;
    for (const ConcatCase& c : all) {
      const std::size_t d = normalized(c.axis, c.shapes[0].rank());
      std::vector<std::vector<T>> parts;
      std::vector<ferry::DeviceArray<T>> arrays;
      std::vector<std::int64_t> dims(c.shapes[0].dims().begin(), c.shapes[0].dims().end());
      dims[d] = 0;
      std::string what = "concat along " + std::to_string(c.axis) + " of";
      for (const Shape& s : c.shapes) {
        parts.push_back(random_values<T>(static_cast<std::size_t>(s.numel()), seed++));
        arrays.push_back(ferry::to_device(dev, parts.back(), s));
        dims[d] += s.dims()[d];
        what += " " + s.to_string();
      }
      SCOPED_TRACE(what);
      const Shape out{std::span<const std::int64_t>(dims)};
      const auto r = ferry::concat(arrays, c.axis);
      EXPECT_EQ(r.shape(), out);
      expect_array(r.to_host(), out, reference_concat(parts, c.shapes, d, out));
    }
  });
}

TYPED_TEST(ShapeOps, ConcatTakesABracedList) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> va = random_values<T>(6, 90);
    const std::vector<T> vb = random_values<T>(3, 91);
    const auto a = ferry::to_device(dev, va, Shape{2, 3});
    const auto b = ferry::to_device(dev, vb, Shape{1, 3});
    std::vector<T> rows(va.begin(), va.end());
    rows.insert(rows.end(), vb.begin(), vb.end());
    rows.insert(rows.end(), va.begin(), va.end());
    expect_array(ferry::concat({a, b, a}, 0).to_host(), Shape{3 + 2, 3}, rows);
    // One array is the array itself.
    const auto one = ferry::concat({a}, -1);
    EXPECT_EQ(&step(one), &step(a));
    expect_array(one.to_host(), Shape{2, 3}, va);
  });
}

// ---- split ----

TYPED_TEST(ShapeOps, SplitCutsConsecutiveParts) {
  using T = TypeParam;
  struct SplitCase {
    Shape shape;
    std::vector<std::int64_t> sizes;
    int axis;
  };
  const SplitCase all[] = {
      {Shape{2, 6}, {1, 2, 3}, 1}, {Shape{2, 6}, {0, 6, 0}, -1},    {Shape{2, 6}, {2}, 0},
      {Shape{5, 2, 3}, {2, 3}, 0}, {Shape{4, 5, 3}, {1, 1, 3}, -2}, {Shape{3, 0}, {0, 0}, 1},
      {Shape{3, 0}, {}, 1},        {Shape{0, 4}, {3, 1}, 1},        {Shape{7}, {7}, 0}};
  for_each_executor([&](const ferry::Device& dev) {
    unsigned seed = 100;
    for (const SplitCase& c : all) {
      SCOPED_TRACE("split of " + c.shape.to_string() + " along " + std::to_string(c.axis));
      const std::vector<T> v = random_values<T>(static_cast<std::size_t>(c.shape.numel()), seed++);
      const std::size_t d = normalized(c.axis, c.shape.rank());
      const std::vector<ferry::DeviceArray<T>> parts =
          ferry::split(ferry::to_device(dev, v, c.shape), c.sizes, c.axis);
      ASSERT_EQ(parts.size(), c.sizes.size());
      std::int64_t begin = 0;
      for (std::size_t i = 0; i < parts.size(); ++i) {
        std::vector<std::int64_t> dims(c.shape.dims().begin(), c.shape.dims().end());
        dims[d] = c.sizes[i];
        const Shape expected_shape{std::span<const std::int64_t>(dims)};
        EXPECT_EQ(parts[i].shape(), expected_shape);
        expect_array(parts[i].to_host(), expected_shape,
                     reference_slice(v, c.shape, d, begin, begin + c.sizes[i]));
        begin += c.sizes[i];
      }
    }
  });
}

TYPED_TEST(ShapeOps, SplitThenConcatRoundTrips) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const std::vector<T> v = random_values<T>(3 * 8 * 2, 120);
    const auto x = ferry::to_device(dev, v, Shape{3, 8, 2});
    const auto parts = ferry::split(x, {3, 0, 4, 1}, 1);
    expect_array(ferry::concat(parts, 1).to_host(), Shape{3, 8, 2}, v);
  });
}

// ---- errors, all thrown at the call ----

class ShapeOpsErrors : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ShapeOpsErrors);

TEST_P(ShapeOpsErrors, Reshape) {
  const auto x = ferry::zeros<float>(dev, Shape{2, 3});
  expect_error<ferry::ShapeError>(
      [&] {
        (void)ferry::reshape(x, {4, 2});
      },
      "[reshape] cannot reshape (2, 3) of 6 elements into (4, 2) of 8");
  EXPECT_THROW((void)ferry::reshape(x, Shape{}), ferry::ShapeError);
  EXPECT_THROW((void)ferry::reshape(x, {6, 0}), ferry::ShapeError);
  EXPECT_THROW((void)ferry::reshape(ferry::reshape(x, {6}), {7}), ferry::ShapeError);
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::reshape(ferry::DeviceArray<bool>(), {1}); },
      "[reshape] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

TEST_P(ShapeOpsErrors, Permute) {
  const auto x = ferry::zeros<std::int32_t>(dev, Shape{2, 3, 4});
  expect_error<ferry::InvalidArgument>(
      [&] {
        (void)ferry::permute(x, {1, 0});
      },
      "[permute] 2 axes given for an array of rank 3");
  EXPECT_THROW((void)ferry::permute(x, {0, 1, 2, 3}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::permute(x, {}), ferry::InvalidArgument);
  expect_error<ferry::InvalidArgument>(
      [&] {
        (void)ferry::permute(x, {0, 0, 1});
      },
      "[permute] axis 0 is given twice");
  EXPECT_THROW((void)ferry::permute(x, {2, 1, -1}), ferry::InvalidArgument);  // -1 is 2
  expect_error<ferry::InvalidArgument>(
      [&] {
        (void)ferry::permute(x, {0, 1, 3});
      },
      "[permute] axis 3 is out of range for rank 3");
  EXPECT_THROW((void)ferry::permute(x, {-4, 1, 2}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::permute(ferry::DeviceArray<float>(), {}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::transpose(ferry::DeviceArray<float>()), ferry::InvalidArgument);
}

TEST_P(ShapeOpsErrors, Slice) {
  const auto x = ferry::zeros<double>(dev, Shape{4, 5, 6});
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::slice(x, 1, 3, 2); },
      "[slice] begin 3 is after end 2 along axis 1 of size 5 in (4, 5, 6)");
  EXPECT_THROW((void)ferry::slice(x, 1, -1, 2), ferry::InvalidArgument);  // -1 is 4
  EXPECT_THROW((void)ferry::slice(x, 1, -6, 2), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::slice(x, 1, 0, 6), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::slice(x, -1, 7, 7), ferry::InvalidArgument);
  expect_error<ferry::InvalidArgument>([&] { (void)ferry::slice(x, 3, 0, 1); },
                                       "[slice] axis 3 is out of range for rank 3");
  EXPECT_THROW((void)ferry::slice(x, -4, 0, 1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::slice(ferry::zeros<float>(dev, Shape{}), 0, 0, 1),
               ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::slice(ferry::DeviceArray<double>(), 0, 0, 0), ferry::InvalidArgument);
}

TEST_P(ShapeOpsErrors, Concat) {
  const auto a = ferry::zeros<float>(dev, Shape{2, 3});
  const auto b = ferry::zeros<float>(dev, Shape{2, 4});
  expect_error<ferry::ShapeError>(
      [&] {
        (void)ferry::concat({a, b}, 0);
      },
      "[concat] shapes (2, 3) and (2, 4) differ outside axis 0");
  EXPECT_NO_THROW((void)ferry::concat({a, b}, 1));  // the same pair joins along the other axis
  EXPECT_THROW((void)ferry::concat({a, ferry::zeros<float>(dev, Shape{2, 3, 1})}, 0),
               ferry::ShapeError);  // ranks differ
  EXPECT_THROW((void)ferry::concat({a, ferry::zeros<float>(dev, Shape{6})}, 0), ferry::ShapeError);
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::concat(std::vector<ferry::DeviceArray<float>>{}, 0); },
      "[concat] needs at least one array");
  EXPECT_THROW((void)ferry::concat({a, a}, 2), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::concat({a, a}, -3), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::concat({a, ferry::DeviceArray<float>()}, 0), ferry::InvalidArgument);
  ferry::Device other = ferry_test::make_device(GetParam());
  expect_error<ferry::DeviceMismatch>(
      [&] {
        (void)ferry::concat({a, a, ferry::zeros<float>(other, Shape{1, 3})}, 0);
      },
      "[concat] arrays live on different devices: " + dev.name() + " and " + other.name());
  EXPECT_THROW((void)ferry::concat(std::vector{ferry::zeros<float>(other, Shape{1, 3}), a}, 0),
               ferry::DeviceMismatch);
}

TEST_P(ShapeOpsErrors, Split) {
  const auto x = ferry::zeros<std::int64_t>(dev, Shape{2, 6});
  expect_error<ferry::ShapeError>(
      [&] {
        (void)ferry::split(x, {2, 3}, 1);
      },
      "[split] part sizes do not add up to 6, the size of axis 1 of (2, 6)");
  EXPECT_THROW((void)ferry::split(x, {4, 3}, 1), ferry::ShapeError);
  EXPECT_THROW((void)ferry::split(x, {}, 1), ferry::ShapeError);
  EXPECT_THROW((void)ferry::split(x, {std::int64_t{1} << 62, std::int64_t{1} << 62}, 0),
               ferry::ShapeError);  // huge sizes must not overflow into a match
  expect_error<ferry::InvalidArgument>(
      [&] {
        (void)ferry::split(x, {7, -1}, 1);
      },
      "[split] negative part size -1");
  EXPECT_THROW((void)ferry::split(x, {1, 1}, 2), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::split(ferry::DeviceArray<bool>(), {0}, 0), ferry::InvalidArgument);
}

// ---- long chains of views ----

class ShapeOpsChains : public OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(ShapeOpsChains);

TEST_P(ShapeOpsChains, TenThousandReshapesDoNotChain) {
  const std::vector<float> v = random_values<float>(24, 7);
  const Shape shapes[] = {Shape{2, 12}, Shape{3, 8}, Shape{24}, Shape{4, 3, 2}};
  const auto x = ferry::to_device(dev, v, Shape{2, 3, 4});
  ferry::DeviceArray<float> r = x;
  for (int i = 0; i < 10000; ++i) r = ferry::reshape(r, shapes[i % 4]);
  // Every reshape viewed the import itself; a chain would make this the 9999th reshape.
  ASSERT_EQ(step(r).input_count(), 1u);
  EXPECT_EQ(&step(r).input(0), &step(x));
  const ferry::HostArray<float> h = r.to_host();
  EXPECT_EQ(h.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()), v);
  // Dropping the last view frees one step, not a chain: a chain would recurse 10,000 deep
  // here (and crash the test under the sanitizers' smaller stack budget).
  r = ferry::DeviceArray<float>();
}

TEST_P(ShapeOpsChains, TenThousandReshapesOfAPendingResult) {
  // The source has not run when the chain is built (on the manual executor, it cannot have),
  // and only the chain's end keeps it alive.
  const std::vector<std::int32_t> v = random_values<std::int32_t>(6, 8);
  ferry::DeviceArray<std::int32_t> r = ferry::transpose(ferry::to_device(dev, v, Shape{2, 3}));
  const ferry::detail::Step* source = &step(r);
  for (int i = 0; i < 10000; ++i) r = ferry::reshape(r, i % 2 == 0 ? Shape{6} : Shape{2, 3});
  EXPECT_EQ(&step(r).input(0), source);
  const auto h = r.to_host();
  EXPECT_EQ(h.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<std::int32_t>(h.data().begin(), h.data().end()),
            (std::vector<std::int32_t>{v[0], v[3], v[1], v[4], v[2], v[5]}));
}

}  // namespace

}  // namespace test_shape_ops
