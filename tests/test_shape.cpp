// Shape (construction, queries, errors), NumPy broadcasting of shapes and strides, and the
// axis helpers every op along one dimension uses.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ferry/core/broadcast.hpp>
#include <ferry/core/error.hpp>
#include <ferry/core/shape.hpp>

#include "support/reference.hpp"

namespace test_shape {

namespace {

using ferry::Shape;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

/// The message of the E that `f` throws; a test failure if it throws nothing. Another exception
/// type escapes and fails the test on its own.
template <class E, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

std::vector<std::int64_t> dims_of(const Shape& s) { return {s.dims().begin(), s.dims().end()}; }

// ---- Construction and queries -----------------------------------------------------------------

TEST(Shape, FromAnIntegralList) {
  const Shape s{32, 784};
  EXPECT_EQ(s.rank(), 2u);
  EXPECT_EQ(s[0], 32);
  EXPECT_EQ(s[1], 784);
  EXPECT_EQ(s.numel(), 32 * 784);
  EXPECT_EQ(dims_of(s), (std::vector<std::int64_t>{32, 784}));
  EXPECT_EQ(s.to_string(), "(32, 784)");
}

TEST(Shape, FromMixedIntegralTypes) {
  // size_t, unsigned, int64 and short all name sizes; the same extents give the same shape.
  const Shape s{std::size_t{2}, 3u, std::int64_t{4}, short{5}};
  EXPECT_EQ(s, (Shape{2, 3, 4, 5}));
  EXPECT_EQ(s.numel(), 120);
  const std::vector<std::int64_t> v{6, 7};
  EXPECT_EQ(Shape(std::span<const std::int64_t>(v)), (Shape{6, 7}));
}

TEST(Shape, ScalarHasRankZeroAndOneElement) {
  const Shape s{};
  EXPECT_EQ(s.rank(), 0u);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.dims().empty());
  EXPECT_EQ(s.begin(), s.end());
  EXPECT_EQ(s.to_string(), "()");
  EXPECT_EQ(Shape(std::span<const std::int64_t>()), s);
}

TEST(Shape, ZeroSizesGiveNoElements) {
  EXPECT_EQ(Shape{0}.numel(), 0);
  const Shape s{3, 0, 2};
  EXPECT_EQ(s.rank(), 3u);
  EXPECT_EQ(s.numel(), 0);
  EXPECT_EQ(s[1], 0);
  EXPECT_EQ(s.to_string(), "(3, 0, 2)");
}

TEST(Shape, RankOneAndTheMaximumRank) {
  EXPECT_EQ(Shape{5}.to_string(), "(5)");
  const Shape full{1, 2, 1, 2, 1, 2, 1, 2};
  static_assert(ferry::kMaxRank == 8);
  EXPECT_EQ(full.rank(), ferry::kMaxRank);
  EXPECT_EQ(full.numel(), 16);
  std::int64_t product = 1;
  for (std::int64_t d : full) product *= d;  // begin()/end() walk the sizes
  EXPECT_EQ(product, 16);
}

TEST(Shape, LargestCountsThatFit) {
  EXPECT_EQ(Shape{kInt64Max}.numel(), kInt64Max);
  // 3037000499^2 is the largest square below 2^63.
  EXPECT_EQ((Shape{3037000499, 3037000499}).numel(), std::int64_t{3037000499} * 3037000499);
  EXPECT_EQ((Shape{std::int64_t{1} << 31, std::int64_t{1} << 31, 0}).numel(), 0);
}

TEST(Shape, Equality) {
  EXPECT_EQ((Shape{2, 3}), (Shape{2, 3}));
  EXPECT_NE((Shape{2, 3}), (Shape{3, 2}));
  EXPECT_NE((Shape{2, 3}), (Shape{2, 3, 1}));  // a trailing 1 is a different shape
  EXPECT_NE(Shape{1}, Shape{});
  EXPECT_NE(Shape{0}, Shape{});
  EXPECT_EQ(Shape{}, Shape{});
}

// ---- Construction and index errors ------------------------------------------------------------

TEST(ShapeErrors, NegativeSize) {
  EXPECT_THROW((Shape{-1}), ferry::InvalidArgument);
  EXPECT_EQ(error_message<ferry::InvalidArgument>([] { (void)Shape{2, -3}; }),
            "[Shape] negative size -3 in dimension 1");
  const std::vector<std::int64_t> v{4, 5, -1};
  EXPECT_EQ(error_message<ferry::InvalidArgument>(
                [&] { (void)Shape(std::span<const std::int64_t>(v)); }),
            "[Shape] negative size -1 in dimension 2");
}

TEST(ShapeErrors, RankAboveTheMaximum) {
  EXPECT_EQ(error_message<ferry::InvalidArgument>([] { (void)Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}; }),
            "[Shape] rank 9 exceeds the maximum of 8");
  const std::vector<std::int64_t> v(12, 2);
  EXPECT_THROW((void)Shape(std::span<const std::int64_t>(v)), ferry::InvalidArgument);
}

TEST(ShapeErrors, ElementCountOverflow) {
  EXPECT_EQ(error_message<ferry::InvalidArgument>(
                [] { (void)Shape{std::int64_t{1} << 32, std::int64_t{1} << 31}; }),
            "[Shape] element count overflows int64 at dimension 1");
  EXPECT_THROW((Shape{3037000500, 3037000500}), ferry::InvalidArgument);
  EXPECT_THROW((Shape{kInt64Max, 2}), ferry::InvalidArgument);
  EXPECT_THROW((Shape{2, 2, kInt64Max / 2 + 1}), ferry::InvalidArgument);
}

TEST(ShapeErrors, OverflowIsAnErrorWhereverAZeroSits) {
  // The non-zero sizes bound the strides, so they must fit even when the count is 0; and the
  // position of the zero must not change the answer.
  constexpr std::int64_t big = std::int64_t{1} << 40;
  EXPECT_THROW((Shape{big, big, 0}), ferry::InvalidArgument);
  EXPECT_THROW((Shape{0, big, big}), ferry::InvalidArgument);
  EXPECT_EQ(error_message<ferry::InvalidArgument>([] { (void)Shape{0, big, big}; }),
            "[Shape] element count overflows int64 at dimension 2");
}

TEST(ShapeErrors, UnsignedSizeAboveInt64) {
  EXPECT_EQ(error_message<ferry::InvalidArgument>(
                [] { (void)Shape{std::numeric_limits<std::uint64_t>::max()}; }),
            "[Shape] size 18446744073709551615 does not fit in int64");
  EXPECT_EQ((Shape{static_cast<std::uint64_t>(kInt64Max)}).numel(), kInt64Max);
}

TEST(ShapeErrors, IndexOutOfRange) {
  const Shape s{2, 3};
  EXPECT_THROW((void)s[2], ferry::InvalidArgument);
  EXPECT_EQ(error_message<ferry::InvalidArgument>([&] { (void)s[2]; }),
            "[Shape] dimension 2 of a rank-2 shape (2, 3)");
  EXPECT_EQ(error_message<ferry::InvalidArgument>([] { (void)Shape{}[0]; }),
            "[Shape] dimension 0 of a rank-0 shape ()");
  // Every ferry error is a ferry::Error and a std::runtime_error.
  EXPECT_THROW((void)s[7], ferry::Error);
  EXPECT_THROW((void)s[7], std::runtime_error);
}

// ---- Strides and axis helpers -------------------------------------------------------------

TEST(ShapeStrides, RowMajor) {
  const auto s = ferry::detail::row_major_strides(Shape{2, 3, 4});
  EXPECT_EQ(s[0], 12);
  EXPECT_EQ(s[1], 4);
  EXPECT_EQ(s[2], 1);
  const auto z = ferry::detail::row_major_strides(Shape{0, 3});
  EXPECT_EQ(z[0], 3);
  EXPECT_EQ(z[1], 1);
}

TEST(ShapeAxes, NormalizeAxisAcceptsNegativeAxes) {
  using ferry::detail::normalize_axis;
  EXPECT_EQ(normalize_axis("softmax", 0, 3), 0u);
  EXPECT_EQ(normalize_axis("softmax", 2, 3), 2u);
  EXPECT_EQ(normalize_axis("softmax", -1, 3), 2u);
  EXPECT_EQ(normalize_axis("softmax", -3, 3), 0u);
  EXPECT_EQ(normalize_axis("sum", -1, 1), 0u);
}

TEST(ShapeAxes, NormalizeAxisRejectsAxesOutOfRange) {
  using ferry::detail::normalize_axis;
  EXPECT_EQ(error_message<ferry::InvalidArgument>([] { (void)normalize_axis("softmax", 3, 3); }),
            "[softmax] axis 3 is out of range for rank 3");
  EXPECT_EQ(error_message<ferry::InvalidArgument>([] { (void)normalize_axis("argmax", -4, 3); }),
            "[argmax] axis -4 is out of range for rank 3");
  EXPECT_THROW((void)normalize_axis("sum", 0, 0), ferry::InvalidArgument);  // a scalar has none
  EXPECT_THROW((void)normalize_axis("sum", -1, 0), ferry::InvalidArgument);
}

TEST(ShapeAxes, AxisViewSplitsAroundOneDimension) {
  using ferry::detail::axis_view;
  const Shape s{2, 3, 4};
  const auto expect_view = [&](std::size_t d, std::int64_t outer, std::int64_t size,
                               std::int64_t inner) {
    const auto v = axis_view(s, d);
    EXPECT_EQ(v.outer, outer) << "axis " << d;
    EXPECT_EQ(v.size, size) << "axis " << d;
    EXPECT_EQ(v.inner, inner) << "axis " << d;
    EXPECT_EQ(v.outer * v.size * v.inner, s.numel());
  };
  expect_view(0, 1, 2, 12);
  expect_view(1, 2, 3, 4);
  expect_view(2, 6, 4, 1);
  const auto one = axis_view(Shape{5}, 0);
  EXPECT_EQ(one.outer, 1);
  EXPECT_EQ(one.size, 5);
  EXPECT_EQ(one.inner, 1);
  const auto empty = axis_view(Shape{2, 0, 3}, 1);
  EXPECT_EQ(empty.outer, 2);
  EXPECT_EQ(empty.size, 0);
  EXPECT_EQ(empty.inner, 3);
}

// ---- Broadcasting -----------------------------------------------------------------------------

Shape broadcast(const Shape& a, const Shape& b) {
  return ferry::detail::broadcast_shapes("add", a, b);
}

TEST(ShapeBroadcast, EqualShapes) {
  EXPECT_EQ(broadcast(Shape{2, 3}, Shape{2, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast(Shape{}, Shape{}), Shape{});
  EXPECT_EQ(broadcast(Shape{1, 2, 1, 2, 1, 2, 1, 2}, Shape{1, 2, 1, 2, 1, 2, 1, 2}),
            (Shape{1, 2, 1, 2, 1, 2, 1, 2}));
}

TEST(ShapeBroadcast, SizeOneDimensionsStretch) {
  EXPECT_EQ(broadcast(Shape{2, 1}, Shape{1, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast(Shape{4, 1, 5}, Shape{3, 1}), (Shape{4, 3, 5}));
  EXPECT_EQ(broadcast(Shape{1}, Shape{7}), Shape{7});
}

TEST(ShapeBroadcast, ScalarsAndMissingLeadingDimensions) {
  EXPECT_EQ(broadcast(Shape{}, Shape{2, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast(Shape{2, 3}, Shape{}), (Shape{2, 3}));
  EXPECT_EQ(broadcast(Shape{3}, Shape{2, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast(Shape{5, 1, 1}, Shape{4}), (Shape{5, 1, 4}));
}

TEST(ShapeBroadcast, ZeroSizes) {
  EXPECT_EQ(broadcast(Shape{1}, Shape{0}), Shape{0});  // 1 stretches to 0
  EXPECT_EQ(broadcast(Shape{0}, Shape{1}), Shape{0});
  EXPECT_EQ(broadcast(Shape{0, 3}, Shape{1, 3}), (Shape{0, 3}));
  EXPECT_EQ(broadcast(Shape{0}, Shape{}), Shape{0});
  EXPECT_EQ(broadcast(Shape{0}, Shape{0}), Shape{0});
  EXPECT_THROW(broadcast(Shape{2}, Shape{0}), ferry::ShapeError);  // only 1 stretches
  EXPECT_EQ(error_message<ferry::ShapeError>([] { broadcast(Shape{0}, Shape{2, 2}); }),
            "[add] shapes (0) and (2, 2) do not broadcast");
}

TEST(ShapeBroadcast, IncompatibleShapesNameTheOpAndBothShapes) {
  EXPECT_EQ(error_message<ferry::ShapeError>([] { broadcast(Shape{2, 3}, Shape{4, 3}); }),
            "[add] shapes (2, 3) and (4, 3) do not broadcast");
  EXPECT_EQ(error_message<ferry::ShapeError>([] {
              ferry::detail::broadcast_shapes("multiply", Shape{3}, Shape{2, 4});
            }),
            "[multiply] shapes (3) and (2, 4) do not broadcast");
  EXPECT_THROW(broadcast(Shape{2, 1}, Shape{4, 3, 1}), ferry::ShapeError);
}

TEST(ShapeBroadcast, IsSymmetric) {
  const std::vector<Shape> shapes{Shape{}, Shape{1}, Shape{3}, Shape{0}, Shape{2, 1},
                                  Shape{1, 3}, Shape{2, 3}, Shape{4, 1, 3}};
  for (const Shape& a : shapes) {
    for (const Shape& b : shapes) {
      SCOPED_TRACE(a.to_string() + " with " + b.to_string());
      bool ab_ok = true;
      bool ba_ok = true;
      Shape ab;
      Shape ba;
      try { ab = broadcast(a, b); } catch (const ferry::ShapeError&) { ab_ok = false; }
      try { ba = broadcast(b, a); } catch (const ferry::ShapeError&) { ba_ok = false; }
      EXPECT_EQ(ab_ok, ba_ok);
      if (ab_ok && ba_ok) {
        EXPECT_EQ(ab, ba);
      }
    }
  }
}

/// Expects that walking `out` with broadcast_strides(in, out) reads the same element of `in`
/// as the textbook broadcasting rule (ferry_test::broadcast_source).
void expect_strides_read_like_broadcasting(const Shape& in, const Shape& out) {
  SCOPED_TRACE(in.to_string() + " as " + out.to_string());
  const auto strides = ferry::detail::broadcast_strides(in, out);
  for (std::int64_t flat = 0; flat < out.numel(); ++flat) {
    const auto idx = ferry_test::unravel(flat, out);
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < out.rank(); ++d) offset += idx[d] * strides[d];
    ASSERT_EQ(offset, ferry_test::broadcast_source(idx, in)) << "at flat index " << flat;
  }
}

TEST(ShapeBroadcast, StridesAreZeroWhereADimensionRepeats) {
  const auto s = ferry::detail::broadcast_strides(Shape{3, 1}, Shape{2, 3, 4});
  EXPECT_EQ(s[0], 0);  // missing leading dimension
  EXPECT_EQ(s[1], 1);  // the row-major stride of (3, 1)'s first dimension
  EXPECT_EQ(s[2], 0);  // size 1, stretched
  const auto same = ferry::detail::broadcast_strides(Shape{2, 3}, Shape{2, 3});
  EXPECT_EQ(same[0], 3);
  EXPECT_EQ(same[1], 1);
  const auto scalar = ferry::detail::broadcast_strides(Shape{}, Shape{2, 2});
  EXPECT_EQ(scalar[0], 0);
  EXPECT_EQ(scalar[1], 0);
}

TEST(ShapeBroadcast, StridesMatchTheReferenceIndexing) {
  const std::vector<std::pair<Shape, Shape>> cases{
      {Shape{2, 3}, Shape{2, 3}},       {Shape{3}, Shape{2, 3}},
      {Shape{2, 1}, Shape{2, 3}},       {Shape{}, Shape{3, 2}},
      {Shape{4, 1, 3}, Shape{2, 4, 5, 3}}, {Shape{1, 1}, Shape{3, 2}},
      {Shape{0, 1}, Shape{0, 4}}};
  for (const auto& [in, out] : cases) {
    ASSERT_EQ(broadcast(in, out), out) << "test case is not a broadcast";
    expect_strides_read_like_broadcasting(in, out);
  }
}

}  // namespace

}  // namespace test_shape
