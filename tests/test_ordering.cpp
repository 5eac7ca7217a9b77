// sort, argsort, topk and take_along_axis: against std::stable_sort of each line (ties, NaN,
// infinities, every axis, both directions), errors by type, gradients against finite
// differences, one jit trace for every batch size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/gradcheck.hpp"

namespace test_ordering {

namespace {

using ferry_test::values_of;

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary
using I64 = ferry::DeviceArray<std::int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class Ordering : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, Ordering, ::testing::Values(0, 2), ferry_test::executor_name);

/// Stable order of each line of a (outer, size, inner) view: NaN after every number.
std::vector<std::int64_t> reference_argsort(const std::vector<double>& v, std::int64_t outer,
                                            std::int64_t size, std::int64_t inner,
                                            bool descending) {
  std::vector<std::int64_t> out(v.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t j) {
        return v[static_cast<std::size_t>((o * size + j) * inner + i)];
      };
      std::vector<std::int64_t> idx(static_cast<std::size_t>(size));
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
        if (std::isnan(at(a))) return false;
        if (std::isnan(at(b))) return true;
        return descending ? at(a) > at(b) : at(a) < at(b);
      });
      for (std::int64_t j = 0; j < size; ++j)
        out[static_cast<std::size_t>((o * size + j) * inner + i)] =
            idx[static_cast<std::size_t>(j)];
    }
  }
  return out;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

TEST_P(Ordering, SortAndArgsortAreStableWithNaNLast) {
  const Shape shape{3, 7, 4};
  std::vector<double> v(84);
  const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, 1.0};
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = i % 5 == 0 ? specials[(i / 5) % 7] : static_cast<double>((i * 37) % 11) - 5;
  const D a = ferry::to_device(dev, v, shape);
  for (int axis : {0, 1, 2}) {
    for (bool descending : {false, true}) {
      SCOPED_TRACE(std::to_string(axis) + (descending ? " descending" : " ascending"));
      const ferry::detail::AxisView view =
          ferry::detail::axis_view(shape, static_cast<std::size_t>(axis));
      const auto want = reference_argsort(v, view.outer, view.size, view.inner, descending);
      EXPECT_EQ(values_of(ferry::argsort(a, axis, descending)), want);
      const auto sorted = values_of(ferry::sort(a, axis, descending));
      for (std::size_t e = 0; e < v.size(); ++e) {
        const std::int64_t i = static_cast<std::int64_t>(e) % view.inner;
        const std::int64_t o = static_cast<std::int64_t>(e) / (view.size * view.inner);
        const double expect =
            v[static_cast<std::size_t>((o * view.size + want[e]) * view.inner + i)];
        EXPECT_TRUE(same(sorted[e], expect)) << e;
      }
    }
  }
  const auto ints = ferry::to_device(dev, std::vector<std::int32_t>{3, -1, 3, 2, -7}, Shape{5});
  EXPECT_EQ(values_of(ferry::sort(ints)), (std::vector<std::int32_t>{-7, -1, 2, 3, 3}));
  EXPECT_EQ(values_of(ferry::argsort(ints, 0, true)), (std::vector<std::int64_t>{0, 2, 3, 1, 4}));
  EXPECT_EQ(ferry::sort(ferry::to_device(dev, std::vector<double>{}, Shape{2, 0})).shape(),
            (Shape{2, 0}));
}

TEST_P(Ordering, TopkPicksTheLargestFirstAndNaNLast) {
  const D a =
      ferry::to_device(dev, {3.0, kNaN, 5.0, 5.0, -1.0, 2.0, 2.0, kNaN, 0.0, 1.0}, Shape{2, 5});
  auto [values, positions] = ferry::topk(a, 3);
  EXPECT_EQ(values.shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of(positions), (std::vector<std::int64_t>{2, 3, 0, 0, 1, 4}));
  EXPECT_EQ(values_of(values), (std::vector<double>{5, 5, 3, 2, 2, 1}));
  auto [all, where] = ferry::topk(a, 5);
  EXPECT_TRUE(std::isnan(values_of(all)[4]));  // a NaN only once the numbers run out
  EXPECT_EQ(ferry::topk(a, 0).first.shape(), (Shape{2, 0}));
  EXPECT_EQ(values_of(ferry::topk(a, 1, 0).second), (std::vector<std::int64_t>{0, 1, 0, 0, 1}));
  EXPECT_THROW((void)ferry::topk(a, 6), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::topk(a, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::topk(a, 1, 2), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::argsort(D{}), ferry::InvalidArgument);
}

TEST_P(Ordering, TakeAlongAxisGathersElementByElement) {
  const D a = ferry::to_device(dev, {10.0, 11.0, 12.0, 20.0, 21.0, 22.0}, Shape{2, 3});
  const I64 idx = ferry::to_device(dev, std::vector<std::int64_t>{2, 0, -1, 1}, Shape{2, 2});
  EXPECT_EQ(values_of(ferry::take_along_axis(a, idx, 1)), (std::vector<double>{12, 10, 22, 21}));
  const I64 rows = ferry::to_device(dev, std::vector<std::int64_t>{1, 0, 1}, Shape{1, 3});
  EXPECT_EQ(values_of(ferry::take_along_axis(a, rows, 0)), (std::vector<double>{20, 11, 22}));
  const I64 wrong = ferry::to_device(dev, std::vector<std::int64_t>{0, 0, 0}, Shape{3, 1});
  EXPECT_THROW((void)ferry::take_along_axis(a, wrong, 1), ferry::ShapeError);
  const I64 far = ferry::to_device(dev, std::vector<std::int64_t>{3, 0}, Shape{2, 1});
  EXPECT_THROW((void)ferry::take_along_axis(a, far, 1).to_host(), ferry::InvalidArgument);
}

TEST_P(Ordering, GradientsMatchFiniteDifferences) {
  check(dev, [](const D& a) { return weighed(ferry::sort(a, 1)); }, draw(Shape{3, 5}));
  check(dev, [](const D& a) { return weighed(ferry::sort(a, 0, true)); }, draw(Shape{4, 2}));
  check(dev, [](const D& a) { return weighed(ferry::topk(a, 2).first); }, draw(Shape{2, 5}));
  const I64 idx = ferry::to_device(dev, std::vector<std::int64_t>{2, 2, 0, 1, 1, 1}, Shape{2, 3});
  check(
      dev, [&](const D& a) { return weighed(ferry::take_along_axis(a, idx, 1)); },
      draw(Shape{2, 4}));
}

TEST_P(Ordering, OneTraceServesEveryBatchSize) {
  auto f = ferry::jit([](D x) {
    auto [v, i] = ferry::topk(x, 2);
    return std::tuple{ferry::sort(x), v, i};
  });
  for (std::int64_t n : {2, 5, 3}) {
    std::vector<double> v(static_cast<std::size_t>(n * 6));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 1.7);
    const D x = ferry::to_device(dev, v, Shape{n, 6});
    auto [s, top, at] = f(x);
    EXPECT_EQ(values_of(s), values_of(ferry::sort(x)));
    EXPECT_EQ(values_of(top), values_of(ferry::topk(x, 2).first));
    EXPECT_EQ(values_of(at), values_of(ferry::topk(x, 2).second));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

}  // namespace

}  // namespace test_ordering
