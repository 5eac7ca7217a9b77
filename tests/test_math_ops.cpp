// The math, predicate, logical, statistics, normalization and loss ops: each against a plain
// reference loop on odd and empty sizes with NaN, infinities and signed zeros; gradients
// against central finite differences; errors by type; one jit trace for several sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"

namespace test_math_ops {

namespace {

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class MathOps : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, MathOps, ::testing::Values(0, 2), ferry_test::executor_name);

/// Special values first, then a spread of ordinary ones: n values in all.
std::vector<double> probe_values(std::size_t n) {
  std::vector<double> v{0.0,  -0.0,  0.5,  -0.5,  1.5,  2.5,  -2.5,
                        kInf, -kInf, kNaN, 1e-10, -3.7, 40.0, -40.0};
  for (std::size_t i = v.size(); i < n; ++i) v.push_back(std::sin(static_cast<double>(i)) * 6);
  v.resize(n);
  return v;
}

/// Same bits, NaN equal to NaN, -0 different from +0.
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

template <class Op, class Ref>
void expect_unary(const ferry::Device& dev, Op op, Ref ref, const Shape& shape, const char* what) {
  SCOPED_TRACE(std::string(what) + " on " + shape.to_string());
  const std::vector<double> in = probe_values(static_cast<std::size_t>(shape.numel()));
  const std::vector<double> out = host(op(ferry::to_device(dev, in, shape)));
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double want = ref(in[i]);
    if (std::isnan(want) || std::isinf(want) || want == 0) {
      EXPECT_TRUE(same(out[i], want)) << "at " << in[i] << ": " << out[i] << " vs " << want;
    } else {
      EXPECT_NEAR(out[i], want, 1e-15 * std::abs(want) + 1e-300) << "at " << in[i];
    }
  }
}

TEST_P(MathOps, UnaryOpsMatchTheReferenceOnOddAndEmptySizes) {
  auto sigmoid = [](double x) {
    return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
  };
  for (const Shape& s : {Shape{7, 3}, Shape{14}, Shape{0, 5}, Shape{}}) {
    expect_unary(
        dev, [](const D& a) { return ferry::sin(a); }, [](double x) { return std::sin(x); }, s,
        "sin");
    expect_unary(
        dev, [](const D& a) { return ferry::cos(a); }, [](double x) { return std::cos(x); }, s,
        "cos");
    expect_unary(
        dev, [](const D& a) { return ferry::erf(a); }, [](double x) { return std::erf(x); }, s,
        "erf");
    expect_unary(
        dev, [](const D& a) { return ferry::floor(a); }, [](double x) { return std::floor(x); }, s,
        "floor");
    expect_unary(
        dev, [](const D& a) { return ferry::ceil(a); }, [](double x) { return std::ceil(x); }, s,
        "ceil");
    expect_unary(
        dev, [](const D& a) { return ferry::round(a); }, [](double x) { return std::nearbyint(x); },
        s, "round");
    expect_unary(
        dev, [](const D& a) { return ferry::sign(a); },
        [](double x) { return std::isnan(x) ? x
                              : x > 0       ? 1.0
                              : x < 0       ? -1.0
                                            : 0.0; }, s, "sign");
    expect_unary(
        dev, [](const D& a) { return ferry::square(a); }, [](double x) { return x * x; }, s,
        "square");
    expect_unary(
        dev, [](const D& a) { return ferry::log1p(a); }, [](double x) { return std::log1p(x); }, s,
        "log1p");
    expect_unary(
        dev, [](const D& a) { return ferry::expm1(a); }, [](double x) { return std::expm1(x); }, s,
        "expm1");
    expect_unary(
        dev, [](const D& a) { return ferry::rsqrt(a); }, [](double x) { return 1 / std::sqrt(x); },
        s, "rsqrt");
    expect_unary(
        dev, [](const D& a) { return ferry::silu(a); },
        // At -inf its limit 0, as gelu's: x * sigmoid(x) alone is -inf * 0 there.
        [&](double x) { return x == -kInf ? 0.0 : x * sigmoid(x); }, s, "silu");
    expect_unary(
        dev, [](const D& a) { return ferry::softplus(a); },
        [](double x) {
          return std::isnan(x) ? x : std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
        },
        s, "softplus");
  }
}

TEST(MathOpsEdges, RoundHalvesToEvenAndSignKeepsNaN) {
  const auto dev = ferry::Device::cpu();
  const auto x = ferry::to_device(dev, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4999}, Shape{6});
  EXPECT_EQ(host(ferry::round(x)), (std::vector<double>{0, 2, 2, -0.0, -2, 2}));
  EXPECT_TRUE(std::signbit(host(ferry::round(x))[3]));
  const auto y = ferry::to_device(dev, {kNaN, -0.0, 3.0}, Shape{3});
  const auto sy = host(ferry::sign(y));
  EXPECT_TRUE(std::isnan(sy[0]));
  EXPECT_EQ(sy[1], 0.0);
  EXPECT_EQ(sy[2], 1.0);
  // softplus neither overflows nor loses small values.
  const auto big = ferry::to_device(dev, {1000.0, -1000.0, 1e-20}, Shape{3});
  const auto sp = host(ferry::softplus(big));
  EXPECT_EQ(sp[0], 1000.0);
  EXPECT_EQ(sp[1], 0.0);
  EXPECT_DOUBLE_EQ(sp[2], std::log(2.0));
}

TEST(MathOpsEdges, IntegerSignAndSquareWrap) {
  const auto dev = ferry::Device::cpu();
  const auto x = ferry::to_device(dev, std::vector<std::int32_t>{-7, 0, 5, 65536}, Shape{4});
  const auto s = ferry::sign(x).to_host();
  const auto q = ferry::square(x).to_host();
  EXPECT_EQ((std::vector<std::int32_t>(s.data().begin(), s.data().end())),
            (std::vector<std::int32_t>{-1, 0, 1, 1}));
  EXPECT_EQ((std::vector<std::int32_t>(q.data().begin(), q.data().end())),
            (std::vector<std::int32_t>{49, 0, 25, 0}));
}

TEST(MathOpsEdges, FloatAndBfloat16ComputeInFloat) {
  const auto dev = ferry::Device::cpu();
  const std::vector<float> v{0.1f, -2.0f, 3.5f};
  const auto xf = ferry::to_device(dev, v, Shape{3});
  const auto s = ferry::silu(xf).to_host();
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_FLOAT_EQ(s.data()[i], v[i] / (1 + std::exp(-v[i])));
  }
  const auto xb = xf.astype<ferry::bfloat16>();
  const auto e = ferry::erf(xb).to_host();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float b = static_cast<float>(ferry::bfloat16(v[i]));
    EXPECT_EQ(static_cast<float>(e.data()[i]), static_cast<float>(ferry::bfloat16(std::erf(b))));
  }
}

/// log_softmax and cross_entropy do not depend on a shift of the logits: -log(2 + e^-1) for
/// (s, s, s - 1) at any s, to T's rounding of it (a - logsumexp(a) rounded logsumexp at s's
/// magnitude first: -0.875 at s = 1e6 in float, -1 at 1000 in float16).
template <class T>
void expect_shift_free(const std::vector<float>& shifts, double tolerance) {
  const auto dev = ferry::Device::cpu();
  const double want = -std::log(2 + std::exp(-1.0));
  const auto label = ferry::to_device(dev, std::vector<std::int64_t>{0}, Shape{1});
  for (const float s : shifts) {
    SCOPED_TRACE("shift " + std::to_string(s));
    const auto x = ferry::to_device(dev, std::vector<T>{T(s), T(s), T(s - 1)}, Shape{1, 3});
    const auto ls = ferry::log_softmax(x, -1).to_host();
    EXPECT_NEAR(static_cast<double>(ls(0, 0)), want, tolerance);
    EXPECT_NEAR(static_cast<double>(ls(0, 2)), want - 1, tolerance);
    EXPECT_NEAR(static_cast<double>(ferry::cross_entropy(x, label).to_host()(0)), -want,
                tolerance);
  }
}

TEST(MathOpsEdges, LogSoftmaxAndCrossEntropyIgnoreAShiftOfTheLogits) {
  expect_shift_free<float>({0, 1e3f, 1e4f, 1e5f, 1e6f}, 2e-7);
  expect_shift_free<ferry::float16>({0, 20, 50, 100, 1000}, 1e-3);
  expect_shift_free<ferry::bfloat16>({0, 20, 50, 100, 200}, 8e-3);  // s - 1 exact in bfloat16
}

/// Half-precision norms and statistics are their float results rounded once: in float16,
/// x^2 is inf past 256 (rms_norm of (300, 400) was 0, std of (0, 600) inf).
template <class T>
void expect_computed_in_float(const std::vector<float>& v, const std::vector<float>& w) {
  const auto dev = ferry::Device::cpu();
  const auto n = static_cast<std::int64_t>(w.size());
  const Shape shape{static_cast<std::int64_t>(v.size()) / n, n};
  const auto xf = ferry::to_device(dev, v, shape);
  const auto wf = ferry::to_device(dev, w, Shape{n});
  const auto x = xf.astype<T>();
  const auto wt = wf.astype<T>();
  // The float reference takes the inputs as T holds them.
  const auto x_back = x.template astype<float>();
  const auto w_back = wt.template astype<float>();
  const auto rounded = [](const ferry::DeviceArray<float>& a) {
    const auto h = a.to_host();
    std::vector<float> out;
    for (const float f : h.data()) out.push_back(static_cast<float>(T(f)));
    return out;
  };
  const auto got = [](const ferry::DeviceArray<T>& a) {
    const auto h = a.to_host();
    std::vector<float> out;
    for (const T t : h.data()) out.push_back(static_cast<float>(t));
    return out;
  };
  EXPECT_EQ(got(ferry::rms_norm(x)), rounded(ferry::rms_norm(x_back)));
  EXPECT_EQ(got(ferry::layer_norm(x, {.weight = wt, .bias = wt, .eps = 1e-3})),
            rounded(ferry::layer_norm(x_back, {.weight = w_back, .bias = w_back, .eps = 1e-3})));
  EXPECT_EQ(got(ferry::var(x, {1}, 1)), rounded(ferry::var(x_back, {1}, 1)));
  EXPECT_EQ(got(ferry::std(x, {-1}, 0, true)), rounded(ferry::std(x_back, {-1}, 0, true)));
  EXPECT_EQ(ferry::std(x, {-1}, 0, true).shape(), (Shape{shape[0], 1}));
}

TEST(MathOpsEdges, HalfPrecisionNormsAndStatisticsComputeInFloat) {
  const std::vector<float> v{300, 400, 0, 600, -1000, 2000, 0.5f, -0.25f};
  const std::vector<float> w{1.5f, -0.5f};
  expect_computed_in_float<ferry::float16>(v, w);
  expect_computed_in_float<ferry::bfloat16>(v, w);
  // The figures the float16 defect gave, now right.
  const auto dev = ferry::Device::cpu();
  const auto x = ferry::to_device(dev, std::vector<float>{300, 400}, Shape{1, 2})
                     .astype<ferry::float16>();
  const auto r = ferry::rms_norm(x).to_host();
  EXPECT_NEAR(static_cast<float>(r(0, 0)), 0.8485f, 1e-3f);
  EXPECT_NEAR(static_cast<float>(r(0, 1)), 1.1314f, 1e-3f);
  const auto y = ferry::to_device(dev, std::vector<float>{0, 600}, Shape{1, 2})
                     .astype<ferry::float16>();
  EXPECT_EQ(static_cast<float>(ferry::std(y).item()), 300.0f);
  EXPECT_EQ(static_cast<float>(ferry::layer_norm(y).to_host()(0, 1)), 1.0f);
}

template <class T>
std::vector<bool> mask_of(const ferry::DeviceArray<T>& m) {
  const auto h = m.to_host();
  return {h.data().begin(), h.data().end()};
}

TEST_P(MathOps, PredicatesOnEveryElementType) {
  const std::vector<double> v{0.0, kNaN, kInf, -kInf, -2.0};
  const auto x = ferry::to_device(dev, v, Shape{5});
  EXPECT_EQ(mask_of(ferry::isnan(x)), (std::vector<bool>{false, true, false, false, false}));
  EXPECT_EQ(mask_of(ferry::isfinite(x)), (std::vector<bool>{true, false, false, false, true}));
  EXPECT_EQ(mask_of(ferry::logical_not(x)), (std::vector<bool>{true, false, false, false, false}));
  const auto i = ferry::to_device(dev, std::vector<std::int64_t>{0, 3}, Shape{2});
  EXPECT_EQ(mask_of(ferry::isnan(i)), (std::vector<bool>{false, false}));
  EXPECT_EQ(mask_of(ferry::isfinite(i)), (std::vector<bool>{true, true}));
  EXPECT_EQ(mask_of(ferry::logical_not(i)), (std::vector<bool>{true, false}));
  const auto b = ferry::to_device(dev, std::vector<bool>{true, false}, Shape{2});
  EXPECT_EQ(mask_of(ferry::logical_not(b)), (std::vector<bool>{false, true}));
  EXPECT_EQ(ferry::isnan(ferry::to_device(dev, std::vector<double>{}, Shape{0, 3})).shape(),
            (Shape{0, 3}));
}

TEST_P(MathOps, ComparisonsAndLogicalOpsBroadcast) {
  const auto a = ferry::to_device(dev, {1.0, 2.0, kNaN, 4.0, 5.0, 6.0}, Shape{2, 3});
  const auto b = ferry::to_device(dev, {2.0, 2.0, 2.0}, Shape{3});
  EXPECT_EQ(mask_of(ferry::less_equal(a, b)),
            (std::vector<bool>{true, true, false, false, false, false}));
  EXPECT_EQ(mask_of(ferry::greater_equal(a, b)),
            (std::vector<bool>{false, true, false, true, true, true}));
  EXPECT_EQ(mask_of(ferry::not_equal(a, b)),
            (std::vector<bool>{true, false, true, true, true, true}));
  EXPECT_EQ(mask_of(ferry::greater_equal(a, 5.0)),
            (std::vector<bool>{false, false, false, false, true, true}));
  EXPECT_EQ(mask_of(ferry::less_equal(2.0, a)),
            (std::vector<bool>{false, true, false, true, true, true}));
  const auto p = ferry::to_device(dev, std::vector<bool>{true, false, true, false}, Shape{2, 2});
  const auto q = ferry::to_device(dev, std::vector<bool>{true, false}, Shape{2});
  EXPECT_EQ(mask_of(ferry::logical_and(p, q)), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(mask_of(ferry::logical_or(p, ferry::logical_not(q))),
            (std::vector<bool>{true, true, true, true}));
  const auto n = ferry::to_device(dev, std::vector<std::int32_t>{0, 7, -1}, Shape{3});
  const auto m = ferry::to_device(dev, std::vector<std::int32_t>{3, 0, 2}, Shape{3});
  EXPECT_EQ(mask_of(ferry::logical_and(n, m)), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(mask_of(ferry::logical_or(n, m)), (std::vector<bool>{true, true, true}));
  // Masks compare for equality, broadcasting, as NumPy's do.
  const auto r = ferry::to_device(dev, std::vector<bool>{true, true}, Shape{2});
  EXPECT_EQ(mask_of(p == r), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(mask_of(ferry::not_equal(p, r)), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(mask_of(p == q), (std::vector<bool>{true, true, true, true}));
  const auto wrong = ferry::to_device(dev, std::vector<bool>{true, false, true}, Shape{3});
  EXPECT_THROW((void)ferry::logical_and(p, wrong), ferry::ShapeError);
  EXPECT_THROW((void)(p == wrong), ferry::ShapeError);
  EXPECT_THROW((void)ferry::not_equal(wrong, q), ferry::ShapeError);
}

TEST_P(MathOps, ClipMatchesNumPy) {
  const auto x = ferry::to_device(dev, {-3.0, -1.0, 0.5, 1.0, 9.0, kNaN}, Shape{6});
  const auto c = host(ferry::clip(x, -1.0, 1.0));
  EXPECT_EQ((std::vector<double>(c.begin(), c.end() - 1)),
            (std::vector<double>{-1, -1, 0.5, 1, 1}));
  EXPECT_TRUE(std::isnan(c.back()));
  EXPECT_EQ(host(ferry::clip(x, 2.0, 1.0))[0], 1.0);  // lo > hi: hi everywhere, as NumPy
  const auto lo = ferry::to_device(dev, {0.0, 0.6, 0.0, 0.0, 0.0, 0.0}, Shape{6});
  EXPECT_EQ(host(ferry::clip(x, lo, 4.0))[1], 0.6);
  EXPECT_THROW((void)ferry::clip(D{}, 0.0, 1.0), ferry::InvalidArgument);
}

// ---- statistics ----

/// var over the last axis of rows x cols, by the textbook two-pass loop.
std::vector<double> reference_var(const std::vector<double>& v, std::size_t rows, std::size_t cols,
                                  int ddof) {
  std::vector<double> out(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0;
    for (std::size_t c = 0; c < cols; ++c) m += v[r * cols + c];
    m /= static_cast<double>(cols);
    double ss = 0;
    for (std::size_t c = 0; c < cols; ++c) ss += (v[r * cols + c] - m) * (v[r * cols + c] - m);
    out[r] = ss / static_cast<double>(static_cast<std::int64_t>(cols) - ddof);
  }
  return out;
}

TEST_P(MathOps, VarAndStdMatchTheReference) {
  const std::size_t rows = 5;
  const std::size_t cols = 7;
  std::vector<double> v(rows * cols);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::cos(static_cast<double>(i) * 1.3) * 4 + 2;
  const auto x = ferry::to_device(dev, v, Shape{5, 7});
  for (int ddof : {0, 1}) {
    const auto want = reference_var(v, rows, cols, ddof);
    const auto got = host(ferry::var(x, {1}, ddof));
    const auto sd = host(ferry::std(x, {-1}, ddof, true));
    ASSERT_EQ(got.size(), rows);
    EXPECT_EQ(ferry::std(x, {-1}, ddof, true).shape(), (Shape{5, 1}));
    for (std::size_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(got[r], want[r], 1e-12);
      EXPECT_NEAR(sd[r], std::sqrt(want[r]), 1e-12);
    }
  }
  // Over every axis; and as NumPy at the edges: n == ddof gives inf, an empty extent NaN.
  const auto all = reference_var(v, 1, rows * cols, 0);
  EXPECT_NEAR(host(ferry::var(x))[0], all[0], 1e-12);
  const auto one = ferry::to_device(dev, {3.0, 5.0}, Shape{2, 1});
  for (double r : host(ferry::var(one, {1}, 1))) EXPECT_TRUE(std::isnan(r));  // 0 / 0
  const auto two = ferry::to_device(dev, {3.0, 5.0}, Shape{1, 2});
  EXPECT_EQ(host(ferry::var(two, {1}, 2)), (std::vector<double>{kInf}));
  const auto empty = ferry::to_device(dev, std::vector<double>{}, Shape{3, 0});
  for (double r : host(ferry::var(empty, {1}))) EXPECT_TRUE(std::isnan(r));
  EXPECT_THROW((void)ferry::var(x, {1}, -1), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::var(x, {2}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::std(D{}), ferry::InvalidArgument);
}

TEST_P(MathOps, LogsumexpIsStableAndHandlesInfinities) {
  const auto x = ferry::to_device(
      dev, {1000.0, 1000.0, -kInf, -kInf, kInf, 1.0, kNaN, 0.0, 1.0, 2.0, 3.0, 4.0}, Shape{4, 3});
  const auto r = host(ferry::logsumexp(x, {1}));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_DOUBLE_EQ(r[0], 1000 + std::log(2.0) + std::log1p(0.0));  // 1000 + log(2 + e^-inf)
  EXPECT_EQ(r[1], kInf);
  EXPECT_TRUE(std::isnan(r[2]));
  EXPECT_NEAR(r[3], std::log(std::exp(2.0) + std::exp(3.0) + std::exp(4.0)), 1e-14);
  const auto none = ferry::to_device(dev, {-kInf, -kInf}, Shape{2});
  EXPECT_EQ(host(ferry::logsumexp(none)), (std::vector<double>{-kInf}));
  const auto empty = ferry::to_device(dev, std::vector<double>{}, Shape{2, 0});
  EXPECT_EQ(host(ferry::logsumexp(empty, {1})), (std::vector<double>{-kInf, -kInf}));
  EXPECT_EQ(ferry::logsumexp(x, {0, 1}, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(ferry::logsumexp(x).shape(), (Shape{}));
  // log_softmax: finite where softmax underflows.
  const auto y = ferry::to_device(dev, {0.0, -800.0, 5.0}, Shape{1, 3});
  const auto ls = host(ferry::log_softmax(y, 1));
  const double lse = 5 + std::log1p(std::exp(-5.0) + std::exp(-805.0));
  EXPECT_NEAR(ls[1], -800 - lse, 1e-12);
  EXPECT_NEAR(ls[2], 5 - lse, 1e-12);
  EXPECT_THROW((void)ferry::log_softmax(y, 2), ferry::InvalidArgument);
}

TEST_P(MathOps, ArgminAnyAllAndCumsum) {
  const auto a = ferry::to_device(dev, {3.0, -1.0, -1.0, 7.0, kNaN, 0.0}, Shape{2, 3});
  EXPECT_EQ(mask_of(ferry::equal(ferry::argmin(a, 1),
                                 ferry::to_device(dev, std::vector<std::int64_t>{1, 1}, Shape{2}))),
            (std::vector<bool>{true, true}));  // the first minimum; the first NaN
  const auto at = ferry::argmin(a, 0, true).to_host();
  EXPECT_EQ((std::vector<std::int64_t>(at.data().begin(), at.data().end())),
            (std::vector<std::int64_t>{0, 1, 0}));
  EXPECT_THROW((void)ferry::argmin(ferry::to_device(dev, std::vector<double>{}, Shape{0}), 0),
               ferry::ShapeError);
  const auto m =
      ferry::to_device(dev, std::vector<bool>{true, false, false, false, true, true}, Shape{2, 3});
  EXPECT_EQ(mask_of(ferry::any(m, {1})), (std::vector<bool>{true, true}));
  EXPECT_EQ(mask_of(ferry::all(m, {0})), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(mask_of(ferry::all(m)), (std::vector<bool>{false}));
  EXPECT_EQ(mask_of(ferry::any(a)), (std::vector<bool>{true}));  // NaN is true, as NumPy
  const auto ints =
      ferry::to_device(dev, std::vector<std::int32_t>{0, 0, 0, 0, -3, 0}, Shape{2, 3});
  EXPECT_EQ(mask_of(ferry::any(ints, {1})), (std::vector<bool>{false, true}));
  const auto halves = ferry::to_device(
      dev, std::vector<ferry::bfloat16>{ferry::bfloat16(0.0f), ferry::bfloat16(-0.0f)}, Shape{2});
  EXPECT_EQ(mask_of(ferry::any(halves)), (std::vector<bool>{false}));  // -0 is zero
  const auto none = ferry::to_device(dev, std::vector<double>{}, Shape{2, 0});
  EXPECT_EQ(mask_of(ferry::any(none, {1})), (std::vector<bool>{false, false}));
  EXPECT_EQ(mask_of(ferry::all(none, {1})), (std::vector<bool>{true, true}));
  const auto c =
      host(ferry::cumsum(ferry::to_device(dev, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, Shape{2, 3}), 0));
  EXPECT_EQ(c, (std::vector<double>{1, 2, 3, 5, 7, 9}));
  const auto r =
      host(ferry::cumsum(ferry::to_device(dev, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, Shape{2, 3}), -1));
  EXPECT_EQ(r, (std::vector<double>{1, 3, 6, 4, 9, 15}));
  const auto i =
      ferry::cumsum(ferry::to_device(dev, std::vector<std::int32_t>{2147483647, 1}, Shape{2}), 0)
          .to_host();
  EXPECT_EQ(i.data()[1], -2147483647 - 1);  // wraps
  check(dev, [](const D& x) { return weighed(ferry::cumsum(x, 1)); }, draw(Shape{3, 4}));
  check(dev, [](const D& x) { return weighed(ferry::cumsum(x, 0)); }, draw(Shape{3, 4}));
}

TEST_P(MathOps, ProdMatchesTheReferenceOnEveryAxisSet) {
  // Rows of 5 holding a zero, an infinity, a NaN and ordinary values; columns of 3.
  const std::vector<double> v{2, -0.5, 3, 1.5, -1, 0, 4, 2, kInf, 1, 0.25, kNaN, -2, 8, 0.5};
  const auto a = ferry::to_device(dev, v, Shape{3, 5});
  std::vector<double> rows(3, 1.0);
  std::vector<double> cols(5, 1.0);
  double all = 1;
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t c = 0; c < 5; ++c) {
      rows[r] *= v[r * 5 + c];
      cols[c] *= v[r * 5 + c];
      all *= v[r * 5 + c];
    }
  }
  auto expect_same = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(same(got[i], want[i])) << i << ": " << got[i] << " vs " << want[i];
  };
  expect_same(host(ferry::prod(a, {1})), rows);  // 0 * inf in row 1 is NaN
  expect_same(host(ferry::prod(a, {0})), cols);
  expect_same(host(ferry::prod(a)), {all});
  EXPECT_EQ(ferry::prod(a, {-1}, true).shape(), (Shape{3, 1}));
  // An empty extent is the identity, 1; a long row is folded in blocks, exactly here.
  EXPECT_EQ(host(ferry::prod(ferry::to_device(dev, std::vector<double>{}, Shape{2, 0}), {1})),
            (std::vector<double>{1, 1}));
  const auto halves = ferry::full<double>(dev, Shape{40000}, 1.0 + 0x1p-20);
  EXPECT_NEAR(scalar(ferry::prod(halves)), std::pow(1.0 + 0x1p-20, 40000), 1e-12);
  // Integers multiply with wrapping, as every integer op.
  const auto i =
      ferry::prod(
          ferry::to_device(dev, std::vector<std::int32_t>{65536, 65536, 3, -7, 5, 2}, Shape{3, 2}),
          {1})
          .to_host();
  EXPECT_EQ((std::vector<std::int32_t>(i.data().begin(), i.data().end())),
            (std::vector<std::int32_t>{0, -21, 10}));
}

TEST_P(MathOps, ProdGradientIsTheProductOfTheOthersEvenAtZeros) {
  check(dev, [](const D& x) { return weighed(ferry::prod(x, {1})); }, draw(Shape{3, 4}));
  check(dev, [](const D& x) { return weighed(ferry::prod(x, {0}, true)); }, draw(Shape{3, 4}));
  check(dev, [](const D& x) { return ferry::prod(x); }, draw(Shape{5}, 0.3, 1.7));
  // Worked by hand: one zero in a row gets the product of the rest, two zeros give nothing.
  const auto x = ferry::to_device(dev, {2.0, 0.0, 3.0, 1.0, 2.0, 4.0, 0.0, 5.0, 0.0}, Shape{3, 3});
  const D g = ferry::grad([](const D& a) { return ferry::sum(ferry::prod(a, {1})); })(x);
  EXPECT_EQ(host(g), (std::vector<double>{0, 6, 0, 8, 4, 2, 0, 0, 0}));
  // The rule is made of ops, so it is differentiated again: d2/dx0 dx2 of x0 x1 x2 is x1.
  check(
      dev,
      [](const D& a) { return weighed(ferry::grad([](const D& b) { return ferry::prod(b); })(a)); },
      draw(Shape{4}, 0.3, 1.7));
  // Again at zeros, by hand: d2/dxi dxj of x0 x1 x2 is the third element, so the gradient of the
  // sum of its gradient is (x1 + x2, x0 + x2, x0 + x1) wherever the zeros are; d3/dx0 dx1 dx2
  // is 1, so one order more gives (2, 2, 2) (the rule is exact there with up to two zeros,
  // and to the second order with more). The rule once gave
  // its constant 0 no gradient: (3, 0, 2) at (2, 0, 3) and (0, 0, 0) at (2, 0, 0).
  const auto sum_of_grad = [](const D& a) {
    return ferry::sum(ferry::grad([](const D& b) { return ferry::prod(b); })(a));
  };
  const auto third = [&](const D& a) { return ferry::sum(ferry::grad(sum_of_grad)(a)); };
  for (const std::vector<double>& at : std::vector<std::vector<double>>{
           {2, 0, 3}, {2, 0, 0}, {0, 0, 0}, {0, 0, 5}, {0, 4, 0}, {1, 2, 3}}) {
    SCOPED_TRACE(::testing::PrintToString(at));
    const D a = ferry::to_device(dev, at, Shape{3});
    EXPECT_EQ(host(ferry::grad(sum_of_grad)(a)),
              (std::vector<double>{at[1] + at[2], at[0] + at[2], at[0] + at[1]}));
    const int zeros = static_cast<int>(std::count(at.begin(), at.end(), 0.0));
    if (zeros > 2) continue;
    // Through prod / x_j (the divisions of the zero-free case): exact but for rounding.
    for (const double d : host(ferry::grad(third)(a))) EXPECT_NEAR(d, 2.0, 1e-12);
  }
}

// ---- loss ----

/// -log softmax(row)[label] in double, by log-sum-exp around the row's maximum.
double cross_entropy_reference(const double* row, std::int64_t classes, std::int64_t label) {
  double m = row[0];
  for (std::int64_t j = 1; j < classes; ++j) m = std::max(m, row[j]);
  double s = 0;
  for (std::int64_t j = 0; j < classes; ++j) s += std::exp(row[j] - m);
  return m + std::log(s) - row[label];
}

TEST_P(MathOps, CrossEntropyMatchesTheReferenceForAnyLeadingShape) {
  for (const Shape& s : {Shape{2, 3, 5}, Shape{7}, Shape{4, 1}, Shape{0, 5}}) {
    SCOPED_TRACE(s.to_string());
    const std::int64_t classes = s.dims()[s.rank() - 1];
    const std::vector<double> logits = probe_values(static_cast<std::size_t>(s.numel()));
    std::vector<double> finite(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i)
      finite[i] = std::isfinite(logits[i]) ? logits[i] : 1000.0 * static_cast<double>(i % 3);
    const std::int64_t count = s.numel() / std::max<std::int64_t>(classes, 1);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(count));
    std::vector<double> want(labels.size());
    for (std::size_t r = 0; r < labels.size(); ++r) {
      labels[r] = static_cast<std::int32_t>((r * 3 + 1) % static_cast<std::size_t>(classes));
      want[r] = cross_entropy_reference(finite.data() + r * static_cast<std::size_t>(classes),
                                        classes, labels[r]);
    }
    std::vector<std::int64_t> label_dims(s.dims().begin(), s.dims().end() - 1);
    const Shape ls{std::span<const std::int64_t>(label_dims)};
    const D loss =
        ferry::cross_entropy(ferry::to_device(dev, finite, s), ferry::to_device(dev, labels, ls));
    EXPECT_EQ(loss.shape(), ls);
    const std::vector<double> got = host(loss);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t r = 0; r < got.size(); ++r)
      EXPECT_NEAR(got[r], want[r], 1e-12 * std::max(1.0, want[r])) << r;
  }
  // One trace for every batch size.
  auto f = ferry::jit(
      [](D x, ferry::DeviceArray<std::int64_t> y) { return ferry::cross_entropy(x, y); });
  for (std::int64_t batch : {2, 5, 3}) {
    std::vector<double> v(static_cast<std::size_t>(batch * 4));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));
    std::vector<std::int64_t> y(static_cast<std::size_t>(batch));
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 4);
    const auto xs = ferry::to_device(dev, v, Shape{batch, 4});
    const auto ys = ferry::to_device(dev, y, Shape{batch});
    EXPECT_EQ(host(f(xs, ys)), host(ferry::cross_entropy(xs, ys)));
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(MathOps, CrossEntropyGradientIsSoftmaxMinusOneHotAndErrorsAreTyped) {
  const auto labels = ferry::to_device(dev, std::vector<std::int64_t>{2, 0, 3}, Shape{3});
  check(
      dev, [&](const D& x) { return weighed(ferry::cross_entropy(x, labels)); }, draw(Shape{3, 4}));
  const auto x = ferry::to_device(dev, {0.5, -1.0, 2.0, 0.0}, Shape{1, 4});
  const D g = ferry::grad([](const D& a) {
    return ferry::sum(ferry::cross_entropy(
        a, ferry::to_device(a.device(), std::vector<std::int64_t>{1}, Shape{1})));
  })(x);
  const std::vector<double> p = host(ferry::softmax(x, -1));
  const std::vector<double> got = host(g);
  for (std::size_t j = 0; j < 4; ++j) EXPECT_NEAR(got[j], p[j] - (j == 1 ? 1.0 : 0.0), 1e-15);

  const auto logits = ferry::to_device(dev, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, Shape{2, 3});
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::cross_entropy(
            logits, ferry::to_device(dev, std::vector<std::int64_t>{0, 1, 2}, Shape{3}));
      },
      "[cross_entropy] needs logits (..., C) with C >= 1 and labels of their shape without C, got "
      "logits (2, 3) and labels (3)");
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::cross_entropy(
            ferry::zeros<double>(dev, Shape{2, 0}),
            ferry::to_device(dev, std::vector<std::int64_t>{0, 0}, Shape{2}));
      },
      "[cross_entropy] needs logits (..., C) with C >= 1 and labels of their shape without C, got "
      "logits (2, 0) and labels (2)");
  const auto out_of_range = ferry::to_device(dev, std::vector<std::int64_t>{0, 3}, Shape{2});
  const D bad = ferry::cross_entropy(logits, out_of_range);  // the values are not known yet
  EXPECT_NE(message_of<ferry::InvalidArgument>([&] { return bad.to_host(); }).find("3"),
            std::string::npos);
}

// ---- normalization ----

TEST_P(MathOps, LayerNormAndRmsNormMatchTheReference) {
  const std::size_t rows = 3;
  const std::size_t cols = 5;
  std::vector<double> v(rows * cols);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 0.7) * 3;
  const std::vector<double> w{1.0, 0.5, -1.0, 2.0, 0.25};
  const std::vector<double> b{0.1, 0.2, 0.3, 0.4, 0.5};
  const auto x = ferry::to_device(dev, v, Shape{3, 5});
  const auto wd = ferry::to_device(dev, w, Shape{5});
  const auto bd = ferry::to_device(dev, b, Shape{5});
  const auto ln = host(ferry::layer_norm(x, {.weight = wd, .bias = bd, .eps = 1e-3}));
  const auto rn = host(ferry::rms_norm(x, {.weight = wd}));
  const auto plain = host(ferry::layer_norm(x));
  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0;
    double ms = 0;
    for (std::size_t c = 0; c < cols; ++c) {
      m += v[r * cols + c];
      ms += v[r * cols + c] * v[r * cols + c];
    }
    m /= cols;
    ms /= cols;
    double var = 0;
    for (std::size_t c = 0; c < cols; ++c) var += (v[r * cols + c] - m) * (v[r * cols + c] - m);
    var /= cols;
    for (std::size_t c = 0; c < cols; ++c) {
      const double xv = v[r * cols + c];
      EXPECT_NEAR(ln[r * cols + c], (xv - m) / std::sqrt(var + 1e-3) * w[c] + b[c], 1e-12);
      EXPECT_NEAR(plain[r * cols + c], (xv - m) / std::sqrt(var + 1e-5), 1e-12);
      EXPECT_NEAR(rn[r * cols + c], xv / std::sqrt(ms + 1e-5) * w[c], 1e-12);
    }
  }
}

TEST_P(MathOps, NormalizationErrorsNameTheOpAndTheShapes) {
  const auto x = ferry::to_device(dev, std::vector<double>(6, 1.0), Shape{2, 3});
  const auto w4 = ferry::to_device(dev, std::vector<double>(4, 1.0), Shape{4});
  const auto w23 = ferry::to_device(dev, std::vector<double>(6, 1.0), Shape{2, 3});
  try {
    (void)ferry::layer_norm(x, {.weight = w4});
    FAIL() << "no error";
  } catch (const ferry::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("layer_norm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)ferry::rms_norm(x, {.bias = w23}), ferry::ShapeError);
  EXPECT_THROW((void)ferry::rms_norm(ferry::to_device(dev, {1.0}, Shape{}), {}), ferry::ShapeError);
  EXPECT_THROW((void)ferry::layer_norm(x, {.eps = -1}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::layer_norm(x, {.eps = kNaN}), ferry::InvalidArgument);
  EXPECT_THROW((void)ferry::layer_norm(D{}), ferry::InvalidArgument);
  const auto other = ferry::to_device(ferry::Device::cpu(), std::vector<double>(3, 1.0), Shape{3});
  if (other.device() != dev) {
    EXPECT_THROW((void)ferry::layer_norm(x, {.weight = other}), ferry::DeviceMismatch);
  }
}

// ---- gradients ----

TEST_P(MathOps, GradientsMatchFiniteDifferences) {
  for (int trial = 0; trial < 4; ++trial) {
    const Shape s = random_shape(trial == 3);
    SCOPED_TRACE(s.to_string());
    const Input x = draw(s);
    const Input pos = draw(s, 0.2, 3);
    check(dev, [](const D& a) { return weighed(ferry::sin(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::cos(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::erf(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::square(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::log1p(a)); }, pos);
    check(dev, [](const D& a) { return weighed(ferry::expm1(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::rsqrt(a)); }, pos);
    check(dev, [](const D& a) { return weighed(ferry::silu(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::softplus(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::clip(a, -0.5, 0.7)); }, x);
  }
  // Piecewise constant: a zero gradient, whatever the cotangent holds.
  const auto x = ferry::to_device(dev, {0.3, -1.7, 2.5}, Shape{3});
  for (auto f : std::vector<std::function<D(const D&)>>{
           [](const D& a) { return ferry::floor(a); }, [](const D& a) { return ferry::ceil(a); },
           [](const D& a) { return ferry::round(a); }, [](const D& a) { return ferry::sign(a); }}) {
    const D g = ferry::grad([&](const D& a) { return ferry::sum(f(a) * kInf + a * 0.0); })(x);
    EXPECT_EQ(host(g), (std::vector<double>{0, 0, 0}));
  }
}

TEST_P(MathOps, CompositeGradientsMatchFiniteDifferences) {
  const Input x = draw(Shape{3, 4});
  const Input w = draw(Shape{4});
  const Input b = draw(Shape{4});
  check(dev, [](const D& a) { return weighed(ferry::var(a, {1})); }, x);
  check(dev, [](const D& a) { return weighed(ferry::var(a, {0}, 1, true)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::std(a, {1}, 1)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::logsumexp(a, {1})); }, x);
  check(dev, [](const D& a) { return weighed(ferry::logsumexp(a)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::log_softmax(a, 0)); }, x);
  check(dev,
        [](const D& a, const D& wt, const D& bs) {
          return weighed(ferry::layer_norm(a, {.weight = wt, .bias = bs}));
        },
        x, w, b);
  check(
      dev,
      [](const D& a, const D& wt) {
        return weighed(ferry::rms_norm(a, {.weight = wt, .eps = 1e-6}));
      },
      x, w);
}

// ---- jit ----

TEST_P(MathOps, OneTraceServesEveryBatchSizeAndFusesTheElementwiseOps) {
  const auto w = ferry::to_device(dev, {1.0, 2.0, 3.0, 4.0}, Shape{4});
  auto f = ferry::jit([&](D x) {
    D h = ferry::silu(ferry::rms_norm(x, {.weight = w}));
    return std::tuple{ferry::logsumexp(h, {1}), ferry::var(x, {1}),
                      ferry::clip(ferry::square(ferry::sin(h)), 0.1, 0.9)};
  });
  for (std::int64_t batch : {2, 5, 3, 7}) {
    SCOPED_TRACE(batch);
    std::vector<double> v(static_cast<std::size_t>(batch * 4));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::cos(static_cast<double>(i)) * 2;
    const auto x = ferry::to_device(dev, v, Shape{batch, 4});
    auto [lse, var, c] = f(x);
    D h = ferry::silu(ferry::rms_norm(x, {.weight = w}));
    EXPECT_EQ(host(lse), host(ferry::logsumexp(h, {1})));
    EXPECT_EQ(host(var), host(ferry::var(x, {1})));
    const auto want = host(ferry::clip(ferry::square(ferry::sin(h)), 0.1, 0.9));
    const auto got = host(c);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  // clip is a maximum and a minimum, each named after the call (as its errors are).
  EXPECT_NE(f.explain().find("fused[sin,square,clip,clip]"), std::string::npos) << f.explain();
}

}  // namespace

}  // namespace test_math_ops
