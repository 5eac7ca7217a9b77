// scaled_dot_product_attention: against softmax(scale q k^T + mask) v written as plain loops (no
// mask, causal, broadcast additive masks, rows with every key masked, more keys than one block),
// in double, float and bfloat16; the errors by type; the model's cost of one fused kernel;
// gradients against finite differences; one jit trace for every sequence length.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/gradcheck.hpp"
#include "support/timeline.hpp"

namespace test_attention {

namespace {

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary

constexpr double kInf = std::numeric_limits<double>::infinity();

class Attention : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, Attention, ::testing::Values(0, 2), ferry_test::executor_name);

std::vector<double> wave(std::int64_t n, double phase) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(static_cast<double>(i) * 0.37 + phase) * 1.5;
  return v;
}

/// The definition, one query row at a time: scores, their maximum, the normalized weights.
/// `mask(b, i, j)` gives the additive mask.
template <class Mask>
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, std::int64_t batch, std::int64_t lq,
                              std::int64_t lk, std::int64_t d, std::int64_t dv, double scale,
                              bool causal, Mask mask) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < lq; ++i) {
      std::vector<double> s(static_cast<std::size_t>(lk), -kInf);
      double m = -kInf;
      for (std::int64_t j = 0; j < lk; ++j) {
        if (causal && j > i) continue;
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e)
          dot += q[static_cast<std::size_t>((b * lq + i) * d + e)] *
                 k[static_cast<std::size_t>((b * lk + j) * d + e)];
        s[static_cast<std::size_t>(j)] = dot * scale + mask(b, i, j);
        m = std::max(m, s[static_cast<std::size_t>(j)]);
      }
      double total = 0;
      for (double& x : s) total += (x = std::exp(x - m));
      for (std::int64_t e = 0; e < dv; ++e) {
        double acc = 0;
        for (std::int64_t j = 0; j < lk; ++j)
          acc +=
              s[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>((b * lk + j) * dv + e)];
        out.push_back(acc / total);
      }
    }
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
    }
  }
}

TEST_P(Attention, MatchesTheDefinition) {
  const auto none = [](std::int64_t, std::int64_t, std::int64_t) { return 0.0; };
  // (batch 2 x heads 3), queries 5, keys 150 (three blocks of keys), D 4, Dv 6.
  for (std::int64_t lk : {7, 150}) {
    SCOPED_TRACE(lk);
    const std::vector<double> q = wave(2 * 3 * 5 * 4, 0.1);
    const std::vector<double> k = wave(2 * 3 * lk * 4, 0.7);
    const std::vector<double> v = wave(2 * 3 * lk * 6, 1.3);
    const D dq = ferry::to_device(dev, q, Shape{2, 3, 5, 4});
    const D dk = ferry::to_device(dev, k, Shape{2, 3, lk, 4});
    const D dv = ferry::to_device(dev, v, Shape{2, 3, lk, 6});
    const D plain = ferry::scaled_dot_product_attention(dq, dk, dv);
    EXPECT_EQ(plain.shape(), (Shape{2, 3, 5, 6}));
    expect_close(host(plain), reference(q, k, v, 6, 5, lk, 4, 6, 0.5, false, none), 1e-13);
    expect_close(
        host(ferry::scaled_dot_product_attention(dq, dk, dv, {.causal = true, .scale = 0.3})),
        reference(q, k, v, 6, 5, lk, 4, 6, 0.3, true, none), 1e-13);
    // A mask over (queries, keys), broadcast over batch and heads, with -inf entries.
    std::vector<double> m(static_cast<std::size_t>(5 * lk));
    for (std::size_t i = 0; i < m.size(); ++i)
      m[i] = i % 3 == 0 ? -kInf : std::cos(static_cast<double>(i));
    const D dm = ferry::to_device(dev, m, Shape{5, lk});
    expect_close(
        host(ferry::scaled_dot_product_attention(dq, dk, dv, {.mask = dm, .causal = true})),
        reference(q, k, v, 6, 5, lk, 4, 6, 0.5, true,
                  [&](std::int64_t, std::int64_t i, std::int64_t j) {
                    return m[static_cast<std::size_t>(i * lk + j)];
                  }),
        1e-13);
    // One per head, broadcast over the batch.
    std::vector<double> h(static_cast<std::size_t>(3 * lk));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = 0.1 * static_cast<double>(i % 11);
    const D dh = ferry::to_device(dev, h, Shape{3, 1, lk});
    expect_close(host(ferry::scaled_dot_product_attention(dq, dk, dv, {.mask = dh})),
                 reference(q, k, v, 6, 5, lk, 4, 6, 0.5, false,
                           [&](std::int64_t b, std::int64_t, std::int64_t j) {
                             return h[static_cast<std::size_t>((b % 3) * lk + j)];
                           }),
                 1e-13);
  }
}

TEST_P(Attention, ARowWithEveryKeyMaskedIsNaNAndNoKeysGiveZeros) {
  const D q = ferry::to_device(dev, wave(2 * 2, 0), Shape{2, 2});
  const D k = ferry::to_device(dev, wave(3 * 2, 1), Shape{3, 2});
  const D v = ferry::to_device(dev, wave(3 * 2, 2), Shape{3, 2});
  const D mask = ferry::to_device(dev, {-kInf, -kInf, -kInf, 0.0, -kInf, 0.0}, Shape{2, 3});
  const auto out = host(ferry::scaled_dot_product_attention(q, k, v, {.mask = mask}));
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_FALSE(std::isnan(out[2]) || std::isnan(out[3]));
  const D nan_q = ferry::to_device(dev, {std::nan(""), 0.0, 1.0, 1.0}, Shape{2, 2});
  const auto with_nan = host(ferry::scaled_dot_product_attention(nan_q, k, v));
  EXPECT_TRUE(std::isnan(with_nan[0]));
  EXPECT_FALSE(std::isnan(with_nan[2]));
  const D no_keys = ferry::to_device(dev, std::vector<double>{}, Shape{0, 2});
  const D no_values = ferry::to_device(dev, std::vector<double>{}, Shape{0, 5});
  // No key at all: a sum over no keys, zeros (PyTorch's softmax of the empty scores is empty,
  // and its product with the empty values zeros), causal or not.
  for (const bool causal : {false, true}) {
    const auto empty =
        host(ferry::scaled_dot_product_attention(q, no_keys, no_values, {.causal = causal}));
    EXPECT_EQ(empty, std::vector<double>(10, 0.0));
  }
  const D no_queries = ferry::to_device(dev, std::vector<double>{}, Shape{4, 0, 2});
  const D k3 = ferry::to_device(dev, wave(4 * 3 * 2, 1), Shape{4, 3, 2});
  EXPECT_EQ(ferry::scaled_dot_product_attention(no_queries, k3, k3).shape(), (Shape{4, 0, 2}));
}

TEST_P(Attention, FloatAndBfloat16AccumulateInFloat) {
  const std::vector<double> q = wave(8 * 16, 0.2);
  const std::vector<double> k = wave(70 * 16, 0.9);
  const std::vector<double> v = wave(70 * 8, 1.7);
  const auto want = reference(q, k, v, 1, 8, 70, 16, 8, 0.25, true, [](auto...) { return 0.0; });
  auto as = [&](const std::vector<double>& x, const Shape& s) {
    return ferry::to_device(dev, x, s).astype<float>();
  };
  const auto f = ferry::scaled_dot_product_attention(as(q, Shape{8, 16}), as(k, Shape{70, 16}),
                                                     as(v, Shape{70, 8}), {.causal = true});
  expect_close(host(f.astype<double>()), want, 1e-5);
  const auto b = ferry::scaled_dot_product_attention(
      as(q, Shape{8, 16}).astype<ferry::bfloat16>(), as(k, Shape{70, 16}).astype<ferry::bfloat16>(),
      as(v, Shape{70, 8}).astype<ferry::bfloat16>(), {.causal = true});
  expect_close(host(b.astype<double>()), want, 3e-2);
}

TEST_P(Attention, ErrorsAtTheCallNameTheOpAndTheShapes) {
  const D q = ferry::to_device(dev, wave(2 * 3 * 4, 0), Shape{2, 3, 4});
  const D k = ferry::to_device(dev, wave(2 * 5 * 4, 0), Shape{2, 5, 4});
  const D v = ferry::to_device(dev, wave(2 * 5 * 6, 0), Shape{2, 5, 6});
  try {
    (void)ferry::scaled_dot_product_attention(q, v, v);
    FAIL() << "no error";
  } catch (const ferry::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("scaled_dot_product_attention"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("q (2, 3, 4), k (2, 5, 6)"), std::string::npos)
        << e.what();
  }
  const D k1 = ferry::to_device(dev, wave(1 * 5 * 4, 0), Shape{1, 5, 4});
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(q, k1, v), ferry::ShapeError);
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(
                   q, k, ferry::to_device(dev, wave(2 * 4 * 6, 0), Shape{2, 4, 6})),
               ferry::ShapeError);
  const D vec = ferry::to_device(dev, wave(4, 0), Shape{4});
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(vec, vec, vec), ferry::ShapeError);
  const D bad_mask = ferry::to_device(dev, wave(3 * 4, 0), Shape{3, 4});
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(q, k, v, {.mask = bad_mask}),
               ferry::ShapeError);
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(q, k, v, {.scale = kInf}),
               ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(D{}, k, v), ferry::InvalidArgument);
  const ferry::Device other = ferry_test::make_device(1);
  EXPECT_THROW((void)ferry::scaled_dot_product_attention(
                   q, ferry::to_device(other, wave(40, 0), Shape{2, 5, 4}), v),
               ferry::DeviceMismatch);
}

TEST(AttentionModel, CostsOneFusedKernelWithoutTheScores) {
  const ferry::Device acc = ferry::Device::modeled(ferry::specs::h100_sxm());
  const std::int64_t b = 2, h = 4, l = 256, d = 64;
  const auto x = ferry::to_device(
      acc, std::vector<float>(static_cast<std::size_t>(b * h * l * d), 0.5f), Shape{b, h, l, d});
  const auto y = ferry::scaled_dot_product_attention(x, x, x, {.causal = true});
  (void)y.to_host();
  const auto slices = ferry_test::named(ferry_test::slices_of(acc), "scaled_dot_product_attention");
  ASSERT_EQ(slices.size(), 1u);
  const double qkv = static_cast<double>(b * h * l * d) * 4;
  EXPECT_DOUBLE_EQ(slices[0].bytes, 3 * qkv + qkv);  // reads q, k, v; writes the output
  EXPECT_DOUBLE_EQ(slices[0].flops, 2.0 * b * h * l * l * 0.5 * (d + d));  // causal: half the pairs
}

TEST_P(Attention, GradientsMatchFiniteDifferences) {
  const Input q = draw(Shape{2, 3, 4});
  const Input k = draw(Shape{2, 5, 4});
  const Input v = draw(Shape{2, 5, 3});
  const Input m = draw(Shape{3, 5});
  check(
      dev,
      [](const D& a, const D& b, const D& c) {
        return weighed(ferry::scaled_dot_product_attention(a, b, c));
      },
      q, k, v);
  check(
      dev,
      [](const D& a, const D& b, const D& c) {
        return weighed(
            ferry::scaled_dot_product_attention(a, b, c, {.causal = true, .scale = 0.7}));
      },
      q, k, v);
  check(dev,
        [](const D& a, const D& b, const D& c, const D& mask) {
          return weighed(ferry::scaled_dot_product_attention(a, b, c, {.mask = mask}));
        },
        q, k, v, m);
}

TEST_P(Attention, OneTraceServesEverySequenceLength) {
  auto f = ferry::jit(
      [](D x) { return ferry::scaled_dot_product_attention(x, x * 0.5, x, {.causal = true}); });
  for (std::int64_t l : {3, 9, 5, 70}) {
    SCOPED_TRACE(l);
    const D x = ferry::to_device(dev, wave(2 * l * 4, 0.3), Shape{2, l, 4});
    EXPECT_EQ(host(f(x)),
              host(ferry::scaled_dot_product_attention(x, x * 0.5, x, {.causal = true})));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

}  // namespace

}  // namespace test_attention
