// index and index_update, NumPy's basic indexing: every kind of entry (positions from either
// end, whole slices, steps both ways with and without bounds, bounds that clamp, empty ranges,
// fewer entries than axes) and their combinations on 1-D to 3-D arrays, in float and int32,
// against a reference written the long way; views where the region is one block and one copy
// otherwise; updates in place when dst is given away; gradients; a traced program replayed for
// new sizes; the errors at the call.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"

namespace test_index {

namespace {

using ferry_test::buffer_of;
using ferry_test::values_of;

using ferry::DeviceArray;
using ferry::Index;
using ferry::Shape;
using ferry::Slice;
using ferry_test::expect_error;
using ferry_test::for_each_executor;

// ---- the reference: NumPy's rules written the long way ----

/// The positions a slice visits on an axis of size n, in order: CPython's slice.indices (the
/// rules NumPy's basic indexing shares), then a walk, one step at a time.
std::vector<std::int64_t> visited(const Slice& s, std::int64_t n) {
  const std::int64_t step = s.step.value_or(1);
  std::vector<std::int64_t> out;
  if (step > 0) {
    std::int64_t b = s.begin.value_or(0);
    std::int64_t e = s.end.value_or(n);
    if (b < 0) b += n;
    if (b < 0) b = 0;
    if (b > n) b = n;
    if (e < 0) e += n;
    if (e < 0) e = 0;
    if (e > n) e = n;
    for (std::int64_t i = b; i < e; i += step) out.push_back(i);
  } else {
    // Omitted, the walk starts at the last element and ends past the first.
    std::int64_t b = s.begin.value_or(n - 1);
    std::int64_t e = s.end.has_value() ? *s.end : -1;
    if (s.begin.has_value() && b < 0) b += n;
    if (b < 0) b = -1;
    if (b > n - 1) b = n - 1;
    if (s.end.has_value() && e < 0) e += n;
    if (e < 0) e = -1;
    if (e > n - 1) e = n - 1;
    for (std::int64_t i = b; i > e; i += step) out.push_back(i);
  }
  return out;
}

/// The region `entries` select of an array of shape `in`: its shape, and the flat position in
/// the source of each of its elements, in row-major order.
struct Region {
  Shape shape;
  std::vector<std::int64_t> sources;
};

Region reference_region(const Shape& in, const std::vector<Index>& entries) {
  std::vector<std::int64_t> kept;
  std::vector<std::int64_t> sources{0};
  for (std::size_t d = 0; d < in.rank(); ++d) {
    const std::int64_t n = in.dims()[d];
    std::vector<std::int64_t> at;
    if (d >= entries.size()) {
      for (std::int64_t i = 0; i < n; ++i) at.push_back(i);
      kept.push_back(n);
    } else if (entries[d].is_position()) {
      const std::int64_t p = entries[d].position();
      at.push_back(p < 0 ? p + n : p);
    } else {
      at = visited(entries[d].slice(), n);
      kept.push_back(static_cast<std::int64_t>(at.size()));
    }
    std::vector<std::int64_t> next;
    for (std::int64_t s : sources) {
      for (std::int64_t p : at) next.push_back(s * n + p);
    }
    sources = std::move(next);
  }
  return {Shape(std::span<const std::int64_t>(kept)), sources};
}

/// 0, 1, 2, ...: every element tells where it came from.
template <class T>
std::vector<T> iota(std::int64_t n, int from = 0) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(static_cast<int>(i) + from);
  return v;
}

template <class T>
std::vector<T> reference_index(const std::vector<T>& in, const Region& r) {
  std::vector<T> out;
  for (std::int64_t s : r.sources) out.push_back(in[static_cast<std::size_t>(s)]);
  return out;
}

template <class T>
std::vector<T> reference_update(std::vector<T> dst, const Region& r, const std::vector<T>& src) {
  for (std::size_t i = 0; i < r.sources.size(); ++i) {
    dst[static_cast<std::size_t>(r.sources[i])] = src[i];
  }
  return dst;
}

std::string text(const std::vector<Index>& entries) {
  return ferry::detail::index_text(entries);
}

// Every kind of entry the issue names, on axes of size 2 or more.
const std::vector<Index>& every_kind() {
  // In groups: positions, from the start and the end; the whole axis; forward steps without
  // and with bounds; backward steps without and with bounds; bounds that clamp; empty ranges.
  static const std::vector<Index> all = {
      0, 2, -1, -3,
      Slice{},
      Slice{.step = 2}, Slice{1, -1}, Slice{.begin = 1, .end = 5, .step = 3},
      Slice{.step = -1}, Slice{.step = -2}, Slice{.begin = -2, .end = 0, .step = -1},
      Slice{.begin = 3, .step = -2}, Slice{.end = 1, .step = -1},
      Slice{-100, 100}, Slice{.begin = -100, .end = 2},
      Slice{.begin = 100, .end = -100, .step = -2},
      Slice{2, 2}, Slice{3, 1}, Slice{1, 3, -1}, Slice{.begin = 100}};
  return all;
}

// One of each kind, for the 3-D sweep (all of them would be 8,000 lists per array).
const std::vector<Index>& one_of_each_kind() {
  static const std::vector<Index> few = {0, -1, Slice{}, Slice{.step = 2}, Slice{.step = -1},
                                         Slice{.begin = -2, .end = 0, .step = -1},
                                         Slice{-100, 100}, Slice{3, 1}};
  return few;
}

/// Calls f(entries) for every list of at most `rank` entries from `pool` (none, fewer than
/// axes, as many), leaving out positions outside their axis.
void for_each_index(const Shape& shape, const std::vector<Index>& pool,
                    const std::function<void(const std::vector<Index>&)>& f) {
  std::vector<Index> entries;
  std::function<void(std::size_t)> grow = [&](std::size_t d) {
    f(entries);
    if (d == shape.rank()) return;
    const std::int64_t n = shape.dims()[d];
    for (const Index& e : pool) {
      if (e.is_position() && (e.position() >= n || e.position() < -n)) continue;
      entries.push_back(e);
      grow(d + 1);
      entries.pop_back();
    }
  };
  grow(0);
}

/// White box: the step behind a handle, to tell a view from a copy.
template <class T>
const ferry::detail::Step& step(const DeviceArray<T>& a) {
  return *ferry::detail::ArrayAccess::step(a);
}

// ---- the reference itself, against Python's slicing (list(range(n))[b:e:s]) ----

TEST(IndexReference, VisitsWhatPythonsSlicingVisits) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(visited(Slice{}, 5), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(visited(Slice{1, -1}, 5), (V{1, 2, 3}));
  EXPECT_EQ(visited(Slice{.step = 2}, 5), (V{0, 2, 4}));
  EXPECT_EQ(visited(Slice{.step = -1}, 5), (V{4, 3, 2, 1, 0}));
  EXPECT_EQ(visited(Slice{.step = -2}, 5), (V{4, 2, 0}));
  EXPECT_EQ(visited(Slice{.begin = 3, .step = -2}, 5), (V{3, 1}));
  EXPECT_EQ(visited(Slice{.end = 1, .step = -1}, 5), (V{4, 3, 2}));
  EXPECT_EQ(visited(Slice{.begin = -2, .end = 0, .step = -1}, 5), (V{3, 2, 1}));
  EXPECT_EQ(visited(Slice{-100, 100}, 5), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(visited(Slice{.begin = 100, .end = -100, .step = -2}, 5), (V{4, 2, 0}));
  EXPECT_EQ(visited(Slice{.begin = 1, .end = 5, .step = 3}, 5), (V{1, 4}));
  EXPECT_EQ(visited(Slice{3, 1}, 5), V{});
  EXPECT_EQ(visited(Slice{1, 3, -1}, 5), V{});
  EXPECT_EQ(visited(Slice{.begin = 100}, 5), V{});
  EXPECT_EQ(visited(Slice{.step = -1}, 0), V{});
  EXPECT_EQ(visited(Slice{.begin = -1, .end = -100, .step = -1}, 1), (V{0}));
}

// ---- index against the reference ----

template <class T>
class IndexOf : public ::testing::Test {};
using Types = ::testing::Types<float, std::int32_t>;
TYPED_TEST_SUITE(IndexOf, Types);

template <class T>
void expect_index_matches(const ferry::Device& dev, const Shape& shape,
                          const std::vector<Index>& pool) {
  const std::vector<T> v = iota<T>(shape.numel());
  const auto x = ferry::to_device(dev, v, shape);
  int cases = 0;
  for_each_index(shape, pool, [&](const std::vector<Index>& entries) {
    ++cases;
    SCOPED_TRACE(shape.to_string() + text(entries));
    const Region r = reference_region(shape, entries);
    const DeviceArray<T> got = ferry::index(x, entries);
    ASSERT_EQ(got.shape(), r.shape);
    ASSERT_EQ(values_of(got), reference_index(v, r));
  });
  EXPECT_GT(cases, 0);
}

TYPED_TEST(IndexOf, OneDimension) {
  for_each_executor([](const ferry::Device& dev) {
    for (const Shape& s : {Shape{5}, Shape{7}, Shape{2}, Shape{1}, Shape{0}}) {
      expect_index_matches<TypeParam>(dev, s, every_kind());
    }
  });
}

TYPED_TEST(IndexOf, TwoDimensions) {
  for_each_executor([](const ferry::Device& dev) {
    for (const Shape& s : {Shape{4, 5}, Shape{3, 1}, Shape{0, 3}}) {
      expect_index_matches<TypeParam>(dev, s, every_kind());
    }
  });
}

TYPED_TEST(IndexOf, ThreeDimensions) {
  for_each_executor([](const ferry::Device& dev) {
    expect_index_matches<TypeParam>(dev, Shape{3, 4, 5}, one_of_each_kind());
  });
}

TYPED_TEST(IndexOf, TheIssuesExample) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    // a[:, 1:-1, 0, ::2] of a (2, 4, 3, 5) array: (2, 2, 3).
    const Shape shape{2, 4, 3, 5};
    const std::vector<T> v = iota<T>(shape.numel());
    const auto x = ferry::to_device(dev, v, shape);
    const auto r = ferry::index(x, {Slice{}, Slice{1, -1}, 0, Slice{.step = 2}});
    EXPECT_EQ(r.shape(), (Shape{2, 2, 3}));
    std::vector<T> expected;
    for (int i = 0; i < 2; ++i) {
      for (int j = 1; j < 3; ++j) {
        for (int l = 0; l < 5; l += 2) {
          expected.push_back(static_cast<T>(((i * 4 + j) * 3 + 0) * 5 + l));
        }
      }
    }
    EXPECT_EQ(values_of(r), expected);
    // A matrix read backwards along its rows, a row, the last row's odd columns, a scalar.
    const auto m = ferry::to_device(dev, iota<T>(12), Shape{3, 4});
    EXPECT_EQ(values_of(ferry::index(m, {Slice{}, Slice{.step = -1}})),
              (std::vector<T>{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}));
    EXPECT_EQ(values_of(ferry::index(m, {1})), (std::vector<T>{4, 5, 6, 7}));
    EXPECT_EQ(values_of(ferry::index(m, {-1, Slice{.begin = 1, .step = 2}})),
              (std::vector<T>{9, 11}));
    const auto scalar = ferry::index(m, {-2, -3});
    EXPECT_EQ(scalar.shape(), Shape{});
    EXPECT_EQ(values_of(scalar), (std::vector<T>{5}));
    // An index of an index.
    EXPECT_EQ(values_of(ferry::index(ferry::index(m, {Slice{.step = -2}}), {Slice{}, Slice{1, 3}})),
              (std::vector<T>{9, 10, 1, 2}));
  });
}

constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

TYPED_TEST(IndexOf, ExtremeBoundsAndStepsNeitherOverflowNorFail) {
  using T = TypeParam;
  for_each_executor([](const ferry::Device& dev) {
    const auto x = ferry::to_device(dev, iota<T>(5), Shape{5});
    EXPECT_EQ(values_of(ferry::index(x, {Slice{.step = kMax}})), (std::vector<T>{0}));
    EXPECT_EQ(values_of(ferry::index(x, {Slice{.step = kMin}})), (std::vector<T>{4}));
    EXPECT_EQ(values_of(ferry::index(x, {Slice{kMin, kMax}})), iota<T>(5));
    EXPECT_EQ(values_of(ferry::index(x, {Slice{kMax, kMin, -1}})), (std::vector<T>{4, 3, 2, 1, 0}));
    EXPECT_EQ(values_of(ferry::index(x, {Slice{.begin = 1, .step = kMin + 1}})),
              (std::vector<T>{1}));
    EXPECT_EQ(ferry::index(x, {Slice{.begin = kMin, .step = -1}}).shape(), Shape{0});
    EXPECT_EQ(ferry::index(x, {Slice{.begin = kMax}}).shape(), Shape{0});
    EXPECT_THROW((void)ferry::index(x, {kMin}), ferry::InvalidArgument);
    EXPECT_THROW((void)ferry::index(x, {kMax}), ferry::InvalidArgument);
  });
}

// ---- views and copies ----

class IndexViews : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(IndexViews);

TEST_P(IndexViews, ARegionInOneBlockIsAViewWithoutACopy) {
  const Shape shape{4, 5, 6};
  const std::vector<float> v = iota<float>(shape.numel());
  const auto x = ferry::to_device(dev, v, shape);
  const std::byte* base = buffer_of(x);
  struct Case {
    std::vector<Index> entries;
    std::int64_t first;  // the flat position of the region's first element
  };
  const Case views[] = {
      {{1}, 30},                                      // a position drops the axis
      {{Slice{1, 3}}, 30},                            // a range of the first axis
      {{-1, Slice{2, 4}}, 90 + 12},                   // a position, then a range
      {{2, 3}, 60 + 18},                              // two positions
      {{2, 3, Slice{1, -1}}, 60 + 18 + 1},            // a range of the last axis
      {{Slice{1, 2}, Slice{2, 4}}, 30 + 12},          // a range of one, then a range
      {{Slice{2, 1, -1}, Slice{.begin = 4, .end = 3, .step = -1}, Slice{.step = 7}}, 60 + 24},
      {{Slice{4, 4}}, 0},                             // empty: no bytes at all
      {{Slice{}, Slice{}, Slice{6}}, 0},
  };
  for (const Case& c : views) {
    SCOPED_TRACE(text(c.entries));
    const Region r = reference_region(shape, c.entries);
    const auto before = dev.stats().steps;
    const auto got = ferry::index(x, c.entries);
    ferry::wait(got);
    EXPECT_EQ(dev.stats().steps, before);  // no copy step ran (views are not counted)
    EXPECT_EQ(step(got).info().kind, ferry::detail::StepKind::view);
    EXPECT_EQ(step(got).info().name, "index");
    EXPECT_EQ(values_of(got), reference_index(v, r));
    if (r.shape.numel() > 0) {
      EXPECT_EQ(buffer_of(got), base + c.first * static_cast<std::int64_t>(sizeof(float)));
    }
    // A view of the view views the source: no chain forms.
    EXPECT_EQ(&step(got).input(0), &step(x));
  }
  // Whole slices are the array itself.
  EXPECT_EQ(&step(ferry::index(x, {})), &step(x));
  EXPECT_EQ(&step(ferry::index(x, {Slice{}, Slice{.begin = 0, .step = 1}})), &step(x));
  // A view of a view is a view of the source.
  const auto row = ferry::index(x, {2});
  const auto cell = ferry::index(row, {3, Slice{1, 3}});
  EXPECT_EQ(&step(cell).input(0), &step(x));
  EXPECT_EQ(buffer_of(cell), base + (60 + 18 + 1) * static_cast<std::int64_t>(sizeof(float)));
}

TEST_P(IndexViews, AStridedRegionIsOneCopy) {
  const Shape shape{4, 5, 6};
  const std::vector<float> v = iota<float>(shape.numel());
  const auto x = ferry::to_device(dev, v, shape);
  ferry::wait(x);
  for (const std::vector<Index>& entries :
       {std::vector<Index>{Slice{}, Slice{1, 3}}, std::vector<Index>{Slice{.step = 2}},
        std::vector<Index>{Slice{.step = -1}},
        std::vector<Index>{Slice{1, -1}, -2, Slice{.step = -3}},
        std::vector<Index>{Slice{}, Slice{}, 0}, std::vector<Index>{3, Slice{}, 4}}) {
    SCOPED_TRACE(text(entries));
    const auto before = dev.stats().steps;
    const auto got = ferry::index(x, entries);
    ferry::wait(got);
    // One step, whatever the number of axes it cuts, named after the call.
    EXPECT_EQ(dev.stats().steps, before + 1);
    EXPECT_EQ(step(got).info().kind, ferry::detail::StepKind::compute);
    EXPECT_EQ(step(got).info().name, "index");
    EXPECT_EQ(values_of(got), reference_index(v, reference_region(shape, entries)));
  }
}

TEST_P(IndexViews, ATiledArrayIsIndexedByItsValues) {
  const std::vector<float> v = iota<float>(40 * 36);
  const auto x = ferry::to_layout(ferry::to_device(dev, v, Shape{40, 36}),
                                  ferry::Layout{ferry::MemorySpace::dram, ferry::Order::tiled});
  for (const std::vector<Index>& entries :
       {std::vector<Index>{3}, std::vector<Index>{Slice{.step = -3}, Slice{33, 1, -4}}}) {
    SCOPED_TRACE(text(entries));
    EXPECT_EQ(values_of(ferry::index(x, entries)),
              reference_index(v, reference_region(Shape{40, 36}, entries)));
  }
}

// ---- index_update ----

template <class T>
class IndexUpdateOf : public ::testing::Test {};
TYPED_TEST_SUITE(IndexUpdateOf, Types);

template <class T>
void expect_update_matches(const ferry::Device& dev, const Shape& shape,
                           const std::vector<Index>& pool) {
  const std::vector<T> v = iota<T>(shape.numel());
  const auto x = ferry::to_device(dev, v, shape);
  for_each_index(shape, pool, [&](const std::vector<Index>& entries) {
    SCOPED_TRACE(shape.to_string() + text(entries));
    const Region r = reference_region(shape, entries);
    const std::vector<T> s = iota<T>(r.shape.numel(), 1000);
    const auto src = ferry::to_device(dev, s, r.shape);
    const std::vector<T> expected = reference_update(v, r, s);
    ASSERT_EQ(values_of(ferry::index_update(x, entries, src)), expected);  // a copy of x
    ASSERT_EQ(values_of(ferry::index_update(ferry::to_device(dev, v, shape), entries, src)),
              expected);  // in place
  });
  EXPECT_EQ(values_of(x), v);  // never written
}

TYPED_TEST(IndexUpdateOf, OneAndTwoDimensions) {
  for_each_executor([](const ferry::Device& dev) {
    expect_update_matches<TypeParam>(dev, Shape{5}, every_kind());
    expect_update_matches<TypeParam>(dev, Shape{0}, every_kind());
    expect_update_matches<TypeParam>(dev, Shape{4, 5}, every_kind());
  });
}

TYPED_TEST(IndexUpdateOf, ThreeDimensions) {
  for_each_executor([](const ferry::Device& dev) {
    expect_update_matches<TypeParam>(dev, Shape{3, 4, 5}, one_of_each_kind());
  });
}

class IndexUpdate : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(IndexUpdate);

TEST_P(IndexUpdate, InPlaceWhenGivenAway) {
  const std::vector<float> v = iota<float>(20);
  auto w = ferry::to_device(dev, v, Shape{4, 5});
  const std::byte* before = buffer_of(w);
  const auto src = ferry::to_device(dev, iota<float>(6, 100), Shape{2, 3});
  const std::vector<Index> entries{Slice{.begin = -1, .step = -2}, Slice{.step = 2}};
  auto u = ferry::index_update(std::move(w), entries, src);
  EXPECT_FALSE(w.valid());  // NOLINT(bugprone-use-after-move): the op took the handle
  EXPECT_EQ(buffer_of(u), before);
  EXPECT_EQ(dev.stats().donations, 1u);
  EXPECT_EQ(step(u).info().name, "index_update");
  EXPECT_EQ(values_of(u),
            reference_update(v, reference_region(Shape{4, 5}, entries), iota<float>(6, 100)));
}

TEST_P(IndexUpdate, NotInPlaceOtherwise) {
  const std::vector<float> v = iota<float>(20);
  const auto w = ferry::to_device(dev, v, Shape{4, 5});
  const std::byte* before = buffer_of(w);
  const auto src = ferry::to_device(dev, iota<float>(5, 100), Shape{5});
  const auto u = ferry::index_update(w, {2}, src);  // an lvalue: never donated
  auto kept = w;
  auto shared = ferry::index_update(std::move(kept), {2}, src);  // not the last handle
  auto viewed = ferry::to_device(dev, v, Shape{4, 5});
  const auto view = ferry::index(viewed, {1});
  auto read = ferry::index_update(std::move(viewed), {2}, src);  // a view shares its buffer
  EXPECT_NE(buffer_of(u), before);
  EXPECT_NE(buffer_of(shared), before);
  std::vector<float> expected = v;
  for (std::size_t i = 0; i < 5; ++i) expected[10 + i] = 100.0f + static_cast<float>(i);
  EXPECT_EQ(values_of(u), expected);
  EXPECT_EQ(values_of(shared), expected);
  EXPECT_EQ(values_of(read), expected);
  EXPECT_EQ(values_of(w), v);  // dst itself is unchanged
  EXPECT_EQ(values_of(view), (std::vector<float>{5, 6, 7, 8, 9}));
  EXPECT_EQ(dev.stats().donations, 0u);
}

TEST_P(IndexUpdate, DstGivenAwayAsItsOwnSrcIsNotUpdatedInPlace) {
  // NumPy's a[::-1] = a: the kernel would read what it had already written, were it in place.
  auto a = ferry::to_device(dev, std::vector<float>{1, 2, 3, 4}, Shape{4});
  auto u = ferry::index_update(std::move(a), {Slice{.step = -1}}, a);
  EXPECT_EQ(values_of(u), (std::vector<float>{4, 3, 2, 1}));
  auto m = ferry::to_device(dev, iota<float>(9), Shape{3, 3});
  auto um = ferry::index_update(std::move(m), {Slice{.step = -1}, Slice{.step = -1}}, m);
  EXPECT_EQ(values_of(um), (std::vector<float>{8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(dev.stats().donations, 0u);
}

TEST_P(IndexUpdate, ARegionOfEverythingIsAllSrc) {
  // Backwards along both axes: every element of dst is written, none of its values read.
  const auto w = ferry::to_device(dev, iota<std::int32_t>(6), Shape{2, 3});
  const auto src = ferry::to_device(dev, iota<std::int32_t>(6, 10), Shape{2, 3});
  EXPECT_EQ(values_of(ferry::index_update(w, {Slice{.step = -1}, Slice{.step = -1}}, src)),
            (std::vector<std::int32_t>{15, 14, 13, 12, 11, 10}));
  EXPECT_EQ(values_of(ferry::index_update(w, {}, src)), iota<std::int32_t>(6, 10));
}

// ---- gradients ----

class IndexGrad : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(IndexGrad);

using ferry_test::check;
using ferry_test::D;
using ferry_test::draw;
using ferry_test::weighed;

TEST_P(IndexGrad, IndexAgainstFiniteDifferences) {
  const ferry_test::Input x = draw(Shape{3, 4, 2});
  for (const std::vector<Index>& entries :
       {std::vector<Index>{1},                                       // a view
        std::vector<Index>{Slice{}, Slice{1, -1}},                   // a copy
        std::vector<Index>{Slice{.step = -2}, Slice{.begin = 3, .step = -3}, -1},
        std::vector<Index>{-1, 2, 0},                                // a scalar
        std::vector<Index>{Slice{2, 2}},                             // empty
        std::vector<Index>{Slice{}, Slice{.begin = -100, .end = 100, .step = 2}}}) {
    SCOPED_TRACE(text(entries));
    check(dev, [&](const D& a) { return weighed(ferry::index(a, entries)); }, x);
  }
}

TEST_P(IndexGrad, IndexUpdateAgainstFiniteDifferences) {
  const ferry_test::Input dst = draw(Shape{4, 5});
  const std::vector<Index> entries{Slice{.begin = -1, .step = -2}, Slice{1, 4}};
  const ferry_test::Input src = draw(Shape{2, 3});
  check(dev, [&](const D& d, const D& s) { return weighed(ferry::index_update(d, entries, s)); },
        dst, src);
  // Squared, so that the cotangents depend on the values too.
  check(dev,
        [&](const D& d, const D& s) {
          const D u = ferry::index_update(d, {2}, ferry::index(s, {0}));
          return weighed(u * u);
        },
        dst, draw(Shape{3, 5}));
}

TEST_P(IndexGrad, ByHand) {
  // d/dx sum(x[::-2]) is 1 where the slice reads and 0 elsewhere; d/dsrc of
  // sum(index_update(dst, [1:3], src) * 3) is 3 everywhere, d/ddst 3 outside the region.
  const D x = ferry::to_device(dev, std::vector<double>{1, 2, 3, 4, 5}, Shape{5});
  const D g =
      ferry::grad([](const D& a) { return ferry::sum(ferry::index(a, {Slice{.step = -2}})); })(x);
  EXPECT_EQ(ferry_test::host(g), (std::vector<double>{1, 0, 1, 0, 1}));
  const D s = ferry::to_device(dev, std::vector<double>{7, 8}, Shape{2});
  auto [gd, gs] = ferry::grad([](const D& d, const D& src) {
    return ferry::sum(ferry::index_update(d, {Slice{1, 3}}, src) * 3.0);
  })(x, s);
  EXPECT_EQ(ferry_test::host(gd), (std::vector<double>{3, 0, 0, 3, 3}));
  EXPECT_EQ(ferry_test::host(gs), (std::vector<double>{3, 3}));
}

// ---- programs ----

class IndexProgram : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(IndexProgram);

template <class T>
void expect_same(const DeviceArray<T>& got, const DeviceArray<T>& want) {
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(values_of(got), values_of(want));
}

TEST_P(IndexProgram, ATracedIndexReplaysForANewBatchSize) {
  auto body = [](DeviceArray<float> x) {
    const auto head = ferry::index(x, {Slice{}, Slice{1, -1}, 0, Slice{.step = 2}});
    const auto last = ferry::index(x, {-1, Slice{.step = -1}});  // a position from the end
    const auto rows = ferry::index(x, {Slice{1, 100}});           // a view (empty for 1)
    return std::tuple{head * 2.0f, last, rows};
  };
  auto f = ferry::jit(body);
  for (std::int64_t batch : {2, 3, 7, 1}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const Shape shape{batch, 4, 3, 5};
    const auto x = ferry::to_device(dev, iota<float>(shape.numel()), shape);
    auto [head, last, rows] = f(x);
    auto [want_head, want_last, want_rows] = body(x);
    EXPECT_EQ(head.shape(), (Shape{batch, 2, 3}));
    expect_same(head, want_head);
    expect_same(last, want_last);
    expect_same(rows, want_rows);
    EXPECT_EQ(step(rows).info().kind, ferry::detail::StepKind::view);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  EXPECT_EQ(f.cache_hits(), 3u) << f.explain();
}

TEST_P(IndexProgram, SliceBoundsFollowSymbolicSizes) {
  // Bounds that clamp and steps both ways, on an axis whose size changes: one trace.
  auto body = [](DeviceArray<std::int32_t> x) {
    return std::tuple{ferry::index(x, {Slice{.begin = 2, .end = 100, .step = 3}}),
                      ferry::index(x, {Slice{.begin = -2, .step = -2}}),
                      ferry::index(x, {Slice{.begin = 4, .end = 1, .step = -1}})};
  };
  auto f = ferry::jit(body);
  for (std::int64_t n : {9, 3, 0, 6, 1, 20}) {
    SCOPED_TRACE("size " + std::to_string(n));
    const auto x = ferry::to_device(dev, iota<std::int32_t>(n), Shape{n});
    auto [a, b, c] = f(x);
    auto [wa, wb, wc] = body(x);
    expect_same(a, wa);
    expect_same(b, wb);
    expect_same(c, wc);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(IndexProgram, APositionIsGuardedToStayInside) {
  auto f = ferry::jit([](DeviceArray<float> x) { return ferry::index(x, {Slice{}, 2}); });
  for (std::int64_t n : {5, 3, 8}) {
    const auto x = ferry::to_device(dev, iota<float>(2 * n), Shape{2, n});
    expect_same(f(x), ferry::index(x, {Slice{}, 2}));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  // Size 2 fails the guard "2 < size": the call traces again and throws.
  EXPECT_THROW(f(ferry::to_device(dev, iota<float>(4), Shape{2, 2})), ferry::InvalidArgument);
}

TEST_P(IndexProgram, ATracedUpdateAndItsGradientReplay) {
  auto loss = [](const D& cache, const D& row) {
    const D u = ferry::index_update(cache, {Slice{}, -1}, row);
    // (batch, 2) both: the batch reversed, rows 1 and 2, column 0; times row 0.
    return ferry::sum(ferry::index(u, {Slice{.step = -1}, Slice{1, 100}, 0}) *
                      ferry::index(u, {Slice{}, 0, Slice{}}));
  };
  auto step_fn = ferry::jit([&](D cache, D row) {
    auto [v, gc, gr] = ferry::value_and_grad(loss)(cache, row);
    return std::tuple{v, gc, gr};
  });
  for (std::int64_t batch : {2, 4, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const ferry_test::Input cache = draw(Shape{batch, 3, 2});
    const ferry_test::Input row = draw(Shape{batch, 2});
    auto [v, gc, gr] = step_fn(ferry_test::on(dev, cache), ferry_test::on(dev, row));
    const D eager = loss(ferry_test::on(dev, cache), ferry_test::on(dev, row));
    const double want = ferry_test::scalar(eager);
    EXPECT_DOUBLE_EQ(ferry_test::scalar(v), want);
    ferry_test::expect_matches_differences(dev, loss, std::array<ferry_test::Input, 2>{cache, row},
                                           std::array<D, 2>{gc, gr});
  }
  EXPECT_EQ(step_fn.cache_size(), 1u) << step_fn.explain();
  EXPECT_EQ(step_fn.cache_hits(), 2u);
}

// ---- errors, all thrown at the call ----

class IndexErrors : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(IndexErrors);

TEST_P(IndexErrors, Index) {
  const auto x = ferry::zeros<float>(dev, Shape{2, 3, 4});
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index(x, {Slice{}, Slice{}, 0, Slice{.step = 2}}); },
      "[index] 4 entries [:, :, 0, ::2] for the 3 axes of (2, 3, 4)");
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index(x, {Slice{}, Slice{}, Slice{}, Slice{}}); },
      "[index] 4 entries [:, :, :, :] for the 3 axes of (2, 3, 4)");  // even whole ones
  expect_error<ferry::InvalidArgument>([&] { (void)ferry::index(x, {0, Slice{1, -1, 0}}); },
                                       "[index] slice 1:-1:0 along axis 1 of (2, 3, 4) has step 0");
  expect_error<ferry::InvalidArgument>([&] { (void)ferry::index(x, {Slice{.step = 0}}); },
                                       "[index] slice ::0 along axis 0 of (2, 3, 4) has step 0");
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index(x, {Slice{}, 3}); },
      "[index] position 3 is outside axis 1 of size 3 in (2, 3, 4)");
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index(x, {0, 0, -5}); },
      "[index] position -5 is outside axis 2 of size 4 in (2, 3, 4)");
  EXPECT_NO_THROW((void)ferry::index(x, {-2, -3, -4}));  // the first element
  EXPECT_THROW((void)ferry::index(ferry::zeros<float>(dev, Shape{}), {0}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::index(ferry::zeros<float>(dev, Shape{0}), {0}), ferry::InvalidArgument);
  EXPECT_NO_THROW((void)ferry::index(ferry::zeros<float>(dev, Shape{0}), {Slice{-1, 1}}));
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index(DeviceArray<float>(), {0}); },
      "[index] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

TEST_P(IndexErrors, IndexUpdate) {
  const auto x = ferry::zeros<float>(dev, Shape{3, 4});
  auto zeros = [&](Shape s) { return ferry::zeros<float>(dev, s); };
  expect_error<ferry::ShapeError>(
      [&] { (void)ferry::index_update(x, {Slice{}, Slice{.step = 2}}, zeros(Shape{2, 3})); },
      "[index_update] src of shape (2, 3) does not match the region (3, 2) that [:, ::2] selects "
      "of (3, 4)");
  // No broadcasting: src has the region's shape exactly.
  EXPECT_THROW((void)ferry::index_update(x, {0}, zeros(Shape{1, 4})), ferry::ShapeError);
  EXPECT_THROW((void)ferry::index_update(x, {0}, zeros(Shape{})), ferry::ShapeError);
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index_update(x, {-4}, zeros(Shape{4})); },
      "[index_update] position -4 is outside axis 0 of size 3 in (3, 4)");
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index_update(x, {0, 0, 0}, zeros(Shape{})); },
      "[index_update] 3 entries [0, 0, 0] for the 2 axes of (3, 4)");
  expect_error<ferry::InvalidArgument>(
      [&] { (void)ferry::index_update(x, {Slice{.step = 0}}, zeros(Shape{3, 4})); },
      "[index_update] slice ::0 along axis 0 of (3, 4) has step 0");
  EXPECT_THROW((void)ferry::index_update(DeviceArray<float>(), {}, x), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::index_update(x, {}, DeviceArray<float>()), ferry::InvalidArgument);
  ferry::Device other = ferry_test::make_device(GetParam());
  expect_error<ferry::DeviceMismatch>(
      [&] { (void)ferry::index_update(x, {0}, ferry::zeros<float>(other, Shape{4})); },
      "[index_update] arrays live on different devices: " + dev.name() + " and " + other.name());
  // A refused call takes nothing: the array given away is still there.
  auto w = ferry::zeros<float>(dev, Shape{3, 4});
  EXPECT_THROW((void)ferry::index_update(std::move(w), {0}, x), ferry::ShapeError);
  EXPECT_TRUE(w.valid());  // NOLINT(bugprone-use-after-move): the call threw before taking it
}

// src and dst of two element types fail to compile with ferry's message:
// tests/compile_fail (index_update_mixed).

}  // namespace

}  // namespace test_index
