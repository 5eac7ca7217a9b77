// take, scatter_add, one_hot, eye, tril, triu and arange of symbolic bounds: against plain
// reference loops on odd and empty sizes, errors by type (an index out of range fails through
// the futures), gradients against finite differences, and one jit trace for several sizes.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"
#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"

namespace test_indexing {

namespace {

using ferry_test::values_of;

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary
using I64 = ferry::DeviceArray<std::int64_t>;

class Indexing : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, Indexing, ::testing::Values(0, 2), ferry_test::executor_name);

std::vector<double> iota_values(std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 0.5 - 3;
  return v;
}

/// take by the definition: out[o, j, i] = a[o, idx[j] (wrapped), i].
std::vector<double> reference_take(const std::vector<double>& a, const Shape& shape, std::size_t d,
                                   const std::vector<std::int64_t>& idx) {
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= shape.dims()[i];
  for (std::size_t i = d + 1; i < shape.rank(); ++i) inner *= shape.dims()[i];
  const std::int64_t size = shape.dims()[d];
  std::vector<double> out;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j : idx) {
      const std::int64_t row = j < 0 ? j + size : j;
      for (std::int64_t i = 0; i < inner; ++i)
        out.push_back(a[static_cast<std::size_t>((o * size + row) * inner + i)]);
    }
  }
  return out;
}

TEST_P(Indexing, TakeMatchesTheReferenceAlongEveryAxis) {
  const Shape shape{3, 4, 5};
  const std::vector<double> v = iota_values(shape.numel());
  const D a = ferry::to_device(dev, v, shape);
  const std::vector<std::int64_t> idx{2, 0, -1, 2, 1, 0};
  for (int axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(axis);
    const std::size_t d = axis < 0 ? 2 : static_cast<std::size_t>(axis);
    const I64 i = ferry::to_device(dev, idx, Shape{2, 3});
    const D t = ferry::take(a, i, axis);
    std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
    dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
    dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(d), {2, 3});
    EXPECT_EQ(t.shape(), Shape(std::span<const std::int64_t>(dims)));
    EXPECT_EQ(values_of(t), reference_take(v, shape, d, idx));
  }
  // int32 indices; a rank-0 index drops the axis; empty indices and empty slices.
  const auto i32 = ferry::to_device(dev, std::vector<std::int32_t>{3, -4}, Shape{2});
  EXPECT_EQ(values_of(ferry::take(a, i32, 1)), reference_take(v, shape, 1, {3, -4}));
  EXPECT_EQ(ferry::take(a, ferry::to_device(dev, std::vector<std::int64_t>{1}, Shape{}), 1).shape(),
            (Shape{3, 5}));
  EXPECT_EQ(ferry::take(a, ferry::to_device(dev, std::vector<std::int64_t>{}, Shape{0}), 0).shape(),
            (Shape{0, 4, 5}));
  const D empty = ferry::to_device(dev, std::vector<double>{}, Shape{4, 0});
  EXPECT_EQ(values_of(ferry::take(
                empty, ferry::to_device(dev, std::vector<std::int64_t>{3, 1}, Shape{2}), 0)),
            std::vector<double>{});
  // Other element types: an embedding table of int32 and of bool.
  const auto ti = ferry::to_device(dev, std::vector<std::int32_t>{10, 11, 20, 21}, Shape{2, 2});
  EXPECT_EQ(values_of(ferry::take(
                ti, ferry::to_device(dev, std::vector<std::int64_t>{1, 1, 0}, Shape{3}), 0)),
            (std::vector<std::int32_t>{20, 21, 20, 21, 10, 11}));
}

TEST_P(Indexing, AnIndexOutOfRangeFailsThroughTheFutures) {
  const D a = ferry::to_device(dev, iota_values(6), Shape{2, 3});
  const D t = ferry::take(a, ferry::to_device(dev, std::vector<std::int64_t>{0, 3}, Shape{2}), 1);
  try {
    (void)t.to_host();
    FAIL() << "no error";
  } catch (const ferry::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("take"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("index 3 is out of range for an axis of size 3"),
              std::string::npos)
        << e.what();
  }
  const D low = ferry::take(a, ferry::to_device(dev, std::vector<std::int64_t>{-3}, Shape{1}), 0);
  EXPECT_THROW((void)low.to_host(), ferry::InvalidArgument);
  // The gradients too, exported alone (an embedding's table, the loss never read), name the
  // op the program called: they said "[scatter_add]" and "[take]" the other way round.
  const I64 bad = ferry::to_device(dev, std::vector<std::int64_t>{0, 7}, Shape{2});
  const auto take_grad =
      ferry::grad([&](const D& x) { return ferry::sum(ferry::take(x, bad, 1)); });
  EXPECT_EQ(message_of<ferry::InvalidArgument>([&] { (void)take_grad(a).to_host(); }),
            "[take] index 7 is out of range for an axis of size 3");
  const auto scatter_grad = ferry::grad([&](const D& u) {
    return ferry::sum(ferry::scatter_add(ferry::zeros<double>(dev, Shape{2, 3}), bad, u, 1));
  });
  EXPECT_EQ(message_of<ferry::InvalidArgument>(
                [&] { (void)scatter_grad(ferry::zeros<double>(dev, Shape{2, 2})).to_host(); }),
            "[scatter_add] index 7 is out of range for an axis of size 3");
  const D s = ferry::scatter_add(a, ferry::to_device(dev, std::vector<std::int64_t>{5}, Shape{1}),
                                 ferry::to_device(dev, iota_values(3), Shape{1, 3}), 0);
  EXPECT_THROW((void)s.to_host(), ferry::InvalidArgument);
  // At the call: a bad axis, an empty handle, updates of the wrong shape, two devices.
  const I64 i = ferry::to_device(dev, std::vector<std::int64_t>{0}, Shape{1});
  EXPECT_THROW((void)ferry::take(a, i, 2), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::take(D{}, i, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::take(a, I64{}, 0), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::scatter_add(a, i, ferry::to_device(dev, iota_values(3), Shape{3}), 0),
               ferry::ShapeError);
  const ferry::Device other = ferry_test::make_device(1);
  EXPECT_THROW(
      (void)ferry::take(a, ferry::to_device(other, std::vector<std::int64_t>{0}, Shape{1}), 0),
      ferry::DeviceMismatch);
}

TEST_P(Indexing, ScatterAddAddsEveryRepeatedIndex) {
  const Shape shape{4, 3};
  const std::vector<double> base = iota_values(12);
  const std::vector<std::int64_t> idx{1, 3, 1, -1, 0};
  std::vector<double> upd(15);
  for (std::size_t k = 0; k < upd.size(); ++k) upd[k] = 1.0 + static_cast<double>(k);
  std::vector<double> want = base;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    const std::int64_t row = idx[j] < 0 ? idx[j] + 4 : idx[j];
    for (std::size_t c = 0; c < 3; ++c)
      want[static_cast<std::size_t>(row) * 3 + c] += upd[j * 3 + c];
  }
  const D a = ferry::to_device(dev, base, shape);
  const I64 i = ferry::to_device(dev, idx, Shape{5});
  const D u = ferry::to_device(dev, upd, Shape{5, 3});
  EXPECT_EQ(values_of(ferry::scatter_add(a, i, u, 0)), want);
  EXPECT_EQ(values_of(a), base);  // kept: a was not given away
  // Given away, the buffer is updated in place.
  D owned = ferry::to_device(dev, base, shape);
  const D in_place = ferry::scatter_add(std::move(owned), i, u, 0);
  EXPECT_FALSE(owned.valid());
  EXPECT_EQ(values_of(in_place), want);
  // Given away as its own updates (np.add.at(a, [3, 2, 1, 0], a)): not in place, which would
  // read updates already added to.
  D self = ferry::to_device(dev, std::vector<double>{1, 2, 3, 4}, Shape{4});
  const I64 reversed = ferry::to_device(dev, std::vector<std::int64_t>{3, 2, 1, 0}, Shape{4});
  EXPECT_EQ(values_of(ferry::scatter_add(std::move(self), reversed, self, 0)),
            (std::vector<double>{5, 5, 5, 5}));
  // And as its own indices (int64 values that index themselves): not in place either.
  I64 ids = ferry::to_device(dev, std::vector<std::int64_t>{1, 0, 0}, Shape{3});
  EXPECT_EQ(values_of(ferry::scatter_add(std::move(ids), ids, ids, 0)),
            (std::vector<std::int64_t>{1, 1, 0}));
  // Along the last axis of a rank-3 array, with int32 elements that wrap.
  const auto big =
      ferry::to_device(dev, std::vector<std::int32_t>{2147483647, 0, 5, 6}, Shape{1, 2, 2});
  const auto ones = ferry::to_device(dev, std::vector<std::int32_t>{1, 1}, Shape{1, 2, 1});
  EXPECT_EQ(values_of(ferry::scatter_add(
                big, ferry::to_device(dev, std::vector<std::int64_t>{0}, Shape{1}), ones, 2)),
            (std::vector<std::int32_t>{-2147483647 - 1, 0, 6, 6}));
}

TEST_P(Indexing, OneHotMatchesTheDefinition) {
  const I64 labels =
      ferry::to_device(dev, std::vector<std::int64_t>{2, 0, 5, -1, 1, 2}, Shape{2, 3});
  const auto h = ferry::one_hot(labels, 3);
  EXPECT_EQ(h.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(values_of(h), (std::vector<float>{0, 0, 1, 1, 0, 0, 0, 0, 0,    // 5: out of range
                                              0, 0, 0, 0, 1, 0, 0, 0, 1}));  // -1: zeros too
  EXPECT_EQ(ferry::one_hot<double>(labels, 0).shape(), (Shape{2, 3, 0}));
  EXPECT_THROW((void)ferry::one_hot(labels, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::one_hot(I64{}, 2), ferry::InvalidArgument);
}

TEST_P(Indexing, EyeTrilAndTriuMatchNumPy) {
  for (std::int64_t k : {-2, -1, 0, 1, 3}) {
    SCOPED_TRACE(k);
    const Shape shape{2, 3, 4};
    const std::vector<double> v = iota_values(shape.numel());
    const D a = ferry::to_device(dev, v, shape);
    const auto lo = values_of(ferry::tril(a, k));
    const auto hi = values_of(ferry::triu(a, k));
    const auto e = values_of(ferry::eye<double>(dev, 3, 4, k));
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::int64_t r = 0; r < 3; ++r) {
        for (std::int64_t c = 0; c < 4; ++c) {
          const std::size_t at = b * 12 + static_cast<std::size_t>(r * 4 + c);
          EXPECT_EQ(lo[at], c - r <= k ? v[at] : 0.0);
          EXPECT_EQ(hi[at], c - r >= k ? v[at] : 0.0);
          if (b == 0) {
            EXPECT_EQ(e[static_cast<std::size_t>(r * 4 + c)], c - r == k ? 1.0 : 0.0);
          }
        }
      }
    }
  }
  EXPECT_EQ(values_of(ferry::eye<std::int32_t>(dev, 2)), (std::vector<std::int32_t>{1, 0, 0, 1}));
  EXPECT_EQ(ferry::eye<float>(dev, 0).shape(), (Shape{0, 0}));
  const auto mask = ferry::tril(ferry::ones<bool>(dev, Shape{3, 3}));
  EXPECT_EQ(values_of(mask),
            (std::vector<bool>{true, false, false, true, true, false, true, true, true}));
  EXPECT_THROW((void)ferry::tril(ferry::to_device(dev, iota_values(3), Shape{3})),
               ferry::ShapeError);
  EXPECT_THROW((void)ferry::triu(D{}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::eye<float>(dev, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::arange<float>(dev, ferry::SymInt(-2)), ferry::InvalidArgument);
}

TEST_P(Indexing, GradientsMatchFiniteDifferences) {
  const I64 idx = ferry::to_device(dev, std::vector<std::int64_t>{2, 0, 2, -1}, Shape{2, 2});
  const Input table = draw(Shape{3, 4});
  check(dev, [&](const D& t) { return weighed(ferry::take(t, idx, 0)); }, table);
  check(dev, [&](const D& t) { return weighed(ferry::take(t, idx, 1)); }, draw(Shape{2, 3}));
  check(
      dev,
      [&](const D& base, const D& upd) { return weighed(ferry::scatter_add(base, idx, upd, 0)); },
      table, draw(Shape{2, 2, 4}));
  check(dev, [](const D& a) { return weighed(ferry::tril(a, -1)); }, draw(Shape{2, 3, 3}));
  check(dev, [](const D& a) { return weighed(ferry::triu(a, 1)); }, draw(Shape{3, 4}));
}

TEST_P(Indexing, OneTraceServesEveryLength) {
  const D table = ferry::to_device(dev, iota_values(20), Shape{5, 4});
  auto f = ferry::jit([&](D x, I64 tokens) {
    const ferry::SymInt n = x.shape()[0];
    const D causal = ferry::tril(ferry::ones<double>(dev, Shape{n, n}));
    const D emb = ferry::take(table, tokens, 0);
    return std::tuple{ferry::matmul(causal, x), emb, ferry::one_hot<double>(tokens, 5),
                      ferry::arange<double>(dev, n), ferry::eye<double>(dev, n)};
  });
  for (std::int64_t n : {3, 6, 2, 4}) {
    SCOPED_TRACE(n);
    const D x = ferry::to_device(dev, iota_values(n * 2), Shape{n, 2});
    std::vector<std::int64_t> t(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>(i * 3 % 5);
    const I64 tokens = ferry::to_device(dev, t, Shape{n});
    auto [causal, emb, hot, range, e] = f(x, tokens);
    EXPECT_EQ(values_of(causal),
              values_of(ferry::matmul(ferry::tril(ferry::ones<double>(dev, Shape{n, n})), x)));
    EXPECT_EQ(values_of(emb), values_of(ferry::take(table, tokens, 0)));
    EXPECT_EQ(values_of(hot), values_of(ferry::one_hot<double>(tokens, 5)));
    EXPECT_EQ(values_of(range), values_of(ferry::arange<double>(dev, n)));
    EXPECT_EQ(values_of(e), values_of(ferry::eye<double>(dev, n)));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(Indexing, ArangeOfSymbolicBoundsMatchesNumPy) {
  // Integer bounds given as SymInts: NumPy's rule, max(0, ceil((stop - start) / step)) values.
  struct Case {
    std::int64_t start, stop, step;
    std::vector<std::int64_t> want;
  };
  for (const Case& c : {Case{2, 9, 3, {2, 5, 8}}, Case{2, 8, 3, {2, 5}}, Case{5, 0, -2, {5, 3, 1}},
                        Case{-3, 1, 1, {-3, -2, -1, 0}}, Case{4, 4, 1, {}}, Case{4, 1, 1, {}},
                        Case{1, 4, -1, {}}, Case{-7, -1, 4, {-7, -3}}}) {
    SCOPED_TRACE(std::to_string(c.start) + ", " + std::to_string(c.stop) + ", " +
                 std::to_string(c.step));
    const I64 r = ferry::arange<std::int64_t>(dev, ferry::SymInt(c.start), ferry::SymInt(c.stop),
                                              ferry::SymInt(c.step));
    EXPECT_EQ(r.shape(), Shape{static_cast<std::int64_t>(c.want.size())});
    EXPECT_EQ(values_of(r), c.want);
    std::vector<double> as_double(c.want.begin(), c.want.end());
    EXPECT_EQ(values_of(ferry::arange<double>(dev, ferry::SymInt(c.start), ferry::SymInt(c.stop),
                                              ferry::SymInt(c.step))),
              as_double);
  }
  EXPECT_EQ(values_of(ferry::arange<std::int32_t>(dev, 3)), (std::vector<std::int32_t>{0, 1, 2}));
  const std::string m = message_of<ferry::InvalidArgument>([&] {
    (void)ferry::arange<std::int64_t>(dev, ferry::SymInt(1), ferry::SymInt(5), ferry::SymInt(0));
  });
  EXPECT_EQ(m, "[arange] needs a non-zero step, got start 1, stop 5, step 0");
}

TEST_P(Indexing, ArangeOfSymbolicBoundsIsOneTracePerSignOfTheStep) {
  // The window [n / 2, n) of a length-n input, stepped by the input's second size: every bound
  // is symbolic, so one trace serves every shape whose step keeps its sign.
  auto f = ferry::jit([&](D x) {
    const ferry::SymInt n = x.shape()[0];
    return ferry::arange<std::int64_t>(dev, n / 2, n, x.shape()[1]);
  });
  for (std::int64_t n : {9, 4, 13, 1}) {
    for (std::int64_t step : {1, 2, 5}) {
      SCOPED_TRACE(std::to_string(n) + " step " + std::to_string(step));
      std::vector<std::int64_t> want;
      for (std::int64_t v = n / 2; v < n; v += step) want.push_back(v);
      EXPECT_EQ(values_of(f(ferry::zeros<double>(dev, Shape{n, step}))), want);
    }
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  // A descending range relies on the step being negative: the other sign is a trace of its own.
  auto down = ferry::jit([&](D x) {
    return ferry::arange<std::int64_t>(dev, x.shape()[0], ferry::SymInt(0),
                                       ferry::SymInt(0) - x.shape()[1]);
  });
  EXPECT_EQ(values_of(down(ferry::zeros<double>(dev, Shape{7, 3}))),
            (std::vector<std::int64_t>{7, 4, 1}));
  EXPECT_EQ(values_of(down(ferry::zeros<double>(dev, Shape{5, 1}))),
            (std::vector<std::int64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(down.cache_size(), 1u) << down.explain();
  // A step of 0 breaks the trace's guard; tracing again gives the eager call's error.
  expect_error<ferry::InvalidArgument>(
      [&] {
        return down(ferry::zeros<double>(dev, Shape{4, 0}));
      },
      "[arange] needs a non-zero step, got start 4, stop 0, step 0");
}

}  // namespace

}  // namespace test_indexing
