// SymFloat: floating scalars as inputs of traced programs. Outside a trace it is a double; a jit
// function's SymFloat parameter is an input of the trace, so a new value replays the same entry
// and reaches every op that used it (scalar arithmetic, fused or not, full, clip, where and the
// gradients of those). Comparisons and conversions are guards; plain float and double
// parameters are constants keyed by value; guards print simplified.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/errors.hpp"

namespace test_sym_float {

namespace {

using ferry::DeviceArray;
using ferry::Shape;
using ferry::SymFloat;
using ferry::SymInt;
using ferry_test::expect_error;

std::vector<float> values(std::int64_t n, int seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 23) -
                              11) /
           4.0f;
  }
  return v;
}

DeviceArray<float> input(const ferry::Device& dev, Shape shape, int seed) {
  return ferry::to_device(dev, values(shape.numel(), seed), shape);
}

template <class T>
std::vector<T> host(const DeviceArray<T>& a) {
  const auto h = a.to_host();
  return std::vector<T>(h.data().begin(), h.data().end());
}

/// `got` equals `want` element by element, exactly: the replay runs the kernels the eager call
/// runs, with the same scalar converted the same way.
void expect_values(const DeviceArray<float>& got, const std::vector<float>& want) {
  const std::vector<float> g = host(got);
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], want[i]) << "element " << i;
}

/// The lines of `text` that start with four spaces: an entry's guards and steps in explain().
std::vector<std::string> indented(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    if (line.rfind("    ", 0) == 0) out.push_back(line.substr(4));
    at = end + 1;
  }
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const std::string& l : indented(text)) {
    if (l == line) return true;
  }
  return false;
}

class SymFloatProgram : public ferry_test::OnEachExecutor {};
FERRY_SWEEP_EXECUTORS(SymFloatProgram);

// ---- outside a trace: a double ----

TEST(SymFloat, IsAPlainDoubleOutsideATrace) {
  const SymFloat a = 0.75;
  const SymFloat b = 2;
  EXPECT_EQ(static_cast<double>(a + b), 0.75 + 2);
  EXPECT_EQ(static_cast<double>(a - b), 0.75 - 2);
  EXPECT_EQ(static_cast<double>(a * b), 0.75 * 2);
  EXPECT_EQ(static_cast<double>(a / b), 0.75 / 2);
  EXPECT_EQ(static_cast<double>(-a), -0.75);
  EXPECT_EQ(static_cast<double>(min(a, b)), 0.75);
  EXPECT_EQ(static_cast<double>(max(a, b)), 2.0);
  EXPECT_EQ(static_cast<double>(0.1 * a + 3), 0.1 * 0.75 + 3);
  EXPECT_EQ(static_cast<float>(a * 0.1f), static_cast<float>(0.75 * static_cast<double>(0.1f)));
  SymFloat c = a;
  c += 1;
  c *= 4;
  c -= 0.5;
  c /= 2;
  EXPECT_EQ(static_cast<double>(c), ((0.75 + 1) * 4 - 0.5) / 2);
  EXPECT_TRUE(a < b);
  EXPECT_TRUE(a <= 0.75);
  EXPECT_TRUE(b > 1.5);
  EXPECT_TRUE(b >= 2);
  EXPECT_TRUE(a == 0.75);
  EXPECT_TRUE(a != b);
  EXPECT_FALSE(a.symbolic());
  EXPECT_EQ(a.to_string(), "0.75");
  EXPECT_EQ(SymFloat(0.1).to_string(), "0.1");
  EXPECT_EQ(SymFloat(1e-5).to_string(), "1e-05");
}

TEST(SymFloat, FollowsDoubleArithmeticAtTheEdges) {
  const SymFloat zero = 0.0;
  EXPECT_EQ(static_cast<double>(SymFloat(1) / zero), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(static_cast<double>(zero / zero)));
  EXPECT_TRUE(std::signbit(static_cast<double>(-zero)));
  const SymFloat nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(nan == nan);
  EXPECT_TRUE(nan != nan);
  EXPECT_FALSE(nan < 1);
  EXPECT_EQ(static_cast<double>(min(SymFloat(3), SymFloat(-2))), -2.0);
}

TEST(SymFloat, MixesWithSymIntsAndIntegers) {
  const SymInt n = 6;
  const SymFloat half = 0.5;
  EXPECT_EQ(static_cast<double>(half * n), 3.0);
  EXPECT_EQ(static_cast<double>(n / SymFloat(4)), 1.5);  // a SymFloat division, not SymInt's
  EXPECT_EQ(static_cast<double>(half + std::int64_t{1} + 2u), 3.5);
  EXPECT_TRUE(half * n == n / 2);
  EXPECT_EQ(static_cast<int>(SymFloat(-2.75)), -2);  // truncates, as static_cast of a double
  EXPECT_EQ(static_cast<std::uint8_t>(SymFloat(255.9)), 255);
}

TEST(SymFloat, ConversionsThatCannotHoldTheValueAreTypedErrors) {
  expect_error<ferry::InvalidArgument>([] { return static_cast<std::int32_t>(SymFloat(3e9)); },
                                       "[SymFloat] value 3e+09 does not fit the integer type");
  expect_error<ferry::InvalidArgument>([] { return static_cast<std::uint8_t>(SymFloat(-1)); },
                                       "[SymFloat] value -1 does not fit the integer type");
  expect_error<ferry::InvalidArgument>(
      [] { return static_cast<std::int64_t>(SymFloat(std::numeric_limits<double>::quiet_NaN())); },
      "[SymFloat] value nan does not fit the integer type");
  expect_error<ferry::InvalidArgument>(
      [] { return static_cast<std::int64_t>(SymFloat(std::numeric_limits<double>::infinity())); },
      "[SymFloat] value inf does not fit the integer type");
}

// ---- ops take SymFloats, eagerly ----

TEST_P(SymFloatProgram, EveryScalarFormOfTheArithmeticOpsTakesASymFloat) {
  const auto x = input(dev, Shape{7}, 1);
  const std::vector<float> xs = values(7, 1);
  const SymFloat s = 0.3;
  const float v = static_cast<float>(0.3);
  const std::vector<std::pair<DeviceArray<float>, float (*)(float, float)>> cases = {
      {x * s, [](float a, float b) { return a * b; }},
      {x + s, [](float a, float b) { return a + b; }},
      {x - s, [](float a, float b) { return a - b; }},
      {x / s, [](float a, float b) { return a / b; }},
  };
  for (const auto& [got, op] : cases) {
    std::vector<float> want;
    for (float e : xs) want.push_back(op(e, v));
    expect_values(got, want);
  }
  std::vector<float> rmul, radd, rsub, rdiv;
  for (float e : xs) {
    rmul.push_back(v * e);
    radd.push_back(v + e);
    rsub.push_back(v - e);
    rdiv.push_back(v / e);
  }
  expect_values(s * x, rmul);
  expect_values(s + x, radd);
  expect_values(s - x, rsub);
  expect_values(s / x, rdiv);
  DeviceArray<float> w = x;
  w *= s;
  expect_values(w, rmul);
  // A SymInt scalar reads as a SymFloat: a size may scale an array.
  std::vector<float> tripled;
  for (float e : xs) tripled.push_back(e * 3.0f);
  expect_values(x * SymInt(3), tripled);
}

TEST_P(SymFloatProgram, FullClipAndWhereTakeSymFloats) {
  expect_values(ferry::full<float>(dev, Shape{2, 2}, SymFloat(1.25)), {1.25f, 1.25f, 1.25f, 1.25f});
  const auto x = input(dev, Shape{9}, 2);
  const std::vector<float> xs = values(9, 2);
  std::vector<float> clipped, kept, chosen;
  for (float e : xs) {
    clipped.push_back(std::min(std::max(e, -1.0f), 1.5f));
    kept.push_back(e > 0 ? e : 0.5f);
    chosen.push_back(e > 0 ? 0.5f : e);
  }
  expect_values(ferry::clip(x, SymFloat(-1.0), SymFloat(1.5)), clipped);
  const DeviceArray<bool> positive = x > SymFloat(0.0);
  expect_values(ferry::where(positive, x, SymFloat(0.5)), kept);
  expect_values(ferry::where(positive, SymFloat(0.5), x), chosen);
}

TEST_P(SymFloatProgram, OpsWithASymFloatThrowTheirOwnTypedErrors) {
  const DeviceArray<float> empty;
  const std::string message =
      "got an empty DeviceArray (default-constructed, moved from or deallocated)";
  expect_error<ferry::InvalidArgument>([&] { return empty * SymFloat(2); },
                                       "[multiply] " + message);
  expect_error<ferry::InvalidArgument>([&] { return SymFloat(2) - empty; },
                                       "[subtract] " + message);
  expect_error<ferry::InvalidArgument>([&] { return ferry::clip(empty, SymFloat(0), SymFloat(1)); },
                                       "[clip] " + message);
  const auto mask = ferry::to_device(dev, std::vector<bool>{true, false, true}, Shape{3});
  expect_error<ferry::ShapeError>(
      [&] { return ferry::where(mask, input(dev, Shape{2}, 1), SymFloat(1)); },
      "[where] shapes (3), (2) and () do not broadcast");
}

// ---- programs: a SymFloat parameter is an input of the trace ----

TEST_P(SymFloatProgram, ALearningRateChangesWithoutARetrace) {
  auto step = ferry::jit(
      [](DeviceArray<float> w, DeviceArray<float> g, SymFloat lr) { return w - lr * g; });
  const auto w = input(dev, Shape{4, 3}, 1);
  const auto g = input(dev, Shape{4, 3}, 2);
  for (double lr : {0.1, 0.05, 0.1, 1e-3}) {
    SCOPED_TRACE(lr);
    std::vector<float> want;
    const std::vector<float> ws = values(12, 1);
    const std::vector<float> gs = values(12, 2);
    for (std::size_t i = 0; i < ws.size(); ++i)
      want.push_back(ws[i] - static_cast<float>(lr) * gs[i]);
    expect_values(step(w, g, lr), want);
  }
  EXPECT_EQ(step.cache_size(), 1u) << step.explain();
  EXPECT_EQ(step.cache_misses(), 1u);
  EXPECT_EQ(step.cache_hits(), 3u);
  // The replay fuses both ops into one kernel, which reads each call's rate; the rate is no
  // guard, only the sizes the two arrays share are.
  const std::vector<std::string> want = {"in0.shape[0] == in1.shape[0]",
                                         "in0.shape[1] == in1.shape[1]",
                                         "v3 = fused[multiply,subtract](in0, in1)"};
  EXPECT_EQ(indented(step.explain()), want) << step.explain();
}

TEST_P(SymFloatProgram, AScalarInputReachesOpsThatAreNotFused) {
  // The product is used twice, so no run is fused: each op's replay reads the parameter.
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat s) {
    const auto y = x * s;
    return std::tuple{y + 1.0f, y - 1.0f, x > s};
  });
  const auto x = input(dev, Shape{6}, 3);
  const std::vector<float> xs = values(6, 3);
  for (double s : {2.0, -0.5, 0.25}) {
    SCOPED_TRACE(s);
    auto [a, b, m] = f(x, s);
    std::vector<float> plus, minus;
    std::vector<bool> above;
    for (float e : xs) {
      plus.push_back(e * static_cast<float>(s) + 1.0f);
      minus.push_back(e * static_cast<float>(s) - 1.0f);
      above.push_back(e > static_cast<float>(s));
    }
    expect_values(a, plus);
    expect_values(b, minus);
    EXPECT_EQ(host(m), above);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  EXPECT_TRUE(has_line(f.explain(), "v1 = multiply(in0, arg0)")) << f.explain();
}

TEST_P(SymFloatProgram, ExpressionsOfScalarInputsAreEvaluatedPerCall) {
  // A schedule's arithmetic inside the program: lr * decay^0 ... as expressions of the inputs,
  // mixed with a size.
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat lr, SymFloat decay) {
    const SymFloat rate = max(lr * decay, SymFloat(1e-3)) / x.shape()[0];
    return x * rate + (1 - decay);
  });
  for (auto [n, lr, decay] :
       {std::tuple{4, 0.5, 0.9}, std::tuple{8, 0.1, 0.5}, std::tuple{3, 1e-4, 0.5}}) {
    SCOPED_TRACE(n);
    const auto x = input(dev, Shape{n}, n);
    const double rate = std::max(lr * decay, 1e-3) / n;
    std::vector<float> want;
    for (float e : values(n, n))
      want.push_back(e * static_cast<float>(rate) + static_cast<float>(1 - decay));
    expect_values(f(x, lr, decay), want);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(SymFloatProgram, FullClipAndWhereReplayWithNewScalars) {
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat lo, SymFloat hi, SymFloat fill) {
    const auto c = ferry::clip(x, lo, hi);
    const auto chosen = ferry::where(x > hi, fill, c);
    return chosen + ferry::full<float>(x.device(), x.shape(), fill * 2);
  });
  for (auto [n, lo, hi, fill] : {std::tuple{5, -1.0, 1.0, 7.0}, std::tuple{9, -0.5, 2.0, -3.0},
                                 std::tuple{2, 0.0, 0.25, 0.5}}) {
    SCOPED_TRACE(n);
    const auto x = input(dev, Shape{n}, n);
    std::vector<float> want;
    for (float e : values(n, n)) {
      const float c = std::min(std::max(e, static_cast<float>(lo)), static_cast<float>(hi));
      want.push_back((e > static_cast<float>(hi) ? static_cast<float>(fill) : c) +
                     static_cast<float>(fill * 2));
    }
    expect_values(f(x, lo, hi, fill), want);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
  EXPECT_EQ(f.cache_hits(), 2u);
}

template <class T>
void expect_same(const DeviceArray<T>& got, const DeviceArray<T>& want) {
  const std::vector<T> g = host(got);
  const std::vector<T> w = host(want);
  ASSERT_EQ(g.size(), w.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_EQ(static_cast<double>(g[i]), static_cast<double>(w[i])) << i;
}

TEST_P(SymFloatProgram, FusedScalarInputsOfEveryFloatingTypeMatchEager) {
  // A fused kernel gets each call's scalar converted to T and widened as the eager op does it.
  auto check = [&]<class T>(std::type_identity<T>) {
    auto body = [](DeviceArray<T> x, SymFloat s) { return ferry::relu(x * s - s / 3); };
    auto f = ferry::jit(body);
    const auto x = input(dev, Shape{3, 5}, 7).astype<T>();
    for (double s : {0.1, 1.0 / 3, -2.5, 1e-3}) expect_same(f(x, s), body(x, s));
    EXPECT_EQ(f.cache_size(), 1u) << f.explain();
    EXPECT_TRUE(has_line(f.explain(), "v3 = fused[multiply,subtract,relu](in0)")) << f.explain();
  };
  check(std::type_identity<float>{});
  check(std::type_identity<double>{});
  check(std::type_identity<ferry::bfloat16>{});
  check(std::type_identity<ferry::float16>{});
}

TEST_P(SymFloatProgram, ASymIntScalesAnArrayWithoutARetrace) {
  auto f = ferry::jit([](DeviceArray<float> x) { return x / x.shape()[0]; });
  for (int n : {2, 5, 8}) {
    std::vector<float> want;
    for (float e : values(n, n)) want.push_back(e / static_cast<float>(n));
    expect_values(f(input(dev, Shape{n}, n)), want);
  }
  EXPECT_EQ(f.cache_size(), 1u) << f.explain();
}

TEST_P(SymFloatProgram, AScheduleDrivesATracedUpdateWithoutARetrace) {
  // The host evaluates the schedule at each step and passes the rate as the SymFloat: ten rates,
  // one trace, and the same parameters as optim::SGD stepping eagerly with that schedule.
  const ferry::optim::LearningRate schedule = ferry::optim::cosine_decay(0.1, 10, 0.01);
  auto step = ferry::jit(
      [](DeviceArray<float> w, DeviceArray<float> g, SymFloat lr) { return w - g * lr; });
  ferry::optim::SGD reference({.lr = schedule});
  std::vector<DeviceArray<float>> eager{input(dev, Shape{2, 3}, 1)};
  DeviceArray<float> w = input(dev, Shape{2, 3}, 1);
  const std::vector<DeviceArray<float>> g{input(dev, Shape{2, 3}, 2)};
  for (std::int64_t t = 0; t < 10; ++t) {
    w = step(w, g[0], schedule(t));
    reference.step(eager, g);
  }
  expect_values(w, host(eager[0]));
  EXPECT_EQ(step.cache_size(), 1u) << step.explain();
  EXPECT_EQ(step.cache_hits(), 9u);
}

// ---- plain floating parameters are constants keyed by value ----

TEST_P(SymFloatProgram, DoubleAndFloatParametersAreConstantsOfATrace) {
  auto f = ferry::jit([](DeviceArray<float> x, double s, float t) { return x * s + t; });
  const auto x = input(dev, Shape{3}, 4);
  const std::vector<float> xs = values(3, 4);
  auto want = [&](double s, float t) {
    std::vector<float> out;
    for (float e : xs) out.push_back(e * static_cast<float>(s) + t);
    return out;
  };
  expect_values(f(x, 0.5, 1.0f), want(0.5, 1.0f));
  expect_values(f(x, 0.25, 1.0f), want(0.25, 1.0f));  // a new value: a new trace
  EXPECT_EQ(f.cache_size(), 2u);
  expect_values(f(x, 0.5, 1.0f), want(0.5, 1.0f));
  expect_values(f(x, 0.25, 2.0f), want(0.25, 2.0f));
  EXPECT_EQ(f.cache_size(), 3u);
  EXPECT_EQ(f.cache_hits(), 1u);
  EXPECT_TRUE(has_line(f.explain(), "arg0 == 0.5")) << f.explain();
  EXPECT_TRUE(has_line(f.explain(), "arg1 == 2")) << f.explain();
}

TEST_P(SymFloatProgram, StaticShapesMakeSymFloatsConstantsToo) {
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat s) { return x * s; },
                      ferry::CacheMode::static_shapes);
  const auto x = input(dev, Shape{3}, 1);
  ferry::wait(f(x, 0.5));
  ferry::wait(f(x, 0.75));
  ferry::wait(f(x, 0.5));
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(f.cache_hits(), 1u);
}

// ---- guards ----

TEST_P(SymFloatProgram, AComparisonIsAGuardThatRetracesWhenCrossed) {
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat lr) {
    if (lr > 0.01) return x * lr;
    return x * 0.0f;
  });
  const auto x = input(dev, Shape{4}, 2);
  const std::vector<float> xs = values(4, 2);
  auto scaled = [&](double lr) {
    std::vector<float> out;
    for (float e : xs) out.push_back(lr > 0.01 ? e * static_cast<float>(lr) : e * 0.0f);
    return out;
  };
  expect_values(f(x, 0.1), scaled(0.1));
  expect_values(f(x, 0.05), scaled(0.05));  // the same side: a replay
  EXPECT_EQ(f.cache_size(), 1u);
  expect_values(f(x, 0.001), scaled(0.001));  // crossed: a new trace
  expect_values(f(x, 0.01), scaled(0.01));
  expect_values(f(x, 0.5), scaled(0.5));
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(f.cache_hits(), 3u);
  const std::string e = f.explain();
  EXPECT_TRUE(has_line(e, "arg0 > 0.01")) << e;
  EXPECT_TRUE(has_line(e, "arg0 <= 0.01")) << e;
}

TEST_P(SymFloatProgram, ConvertingToANumberGuardsTheValue) {
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat scale) {
    // A host decision on the value: the trace holds for this value only.
    const int repeats = static_cast<int>(scale * 2);
    auto y = x;
    for (int i = 0; i < repeats; ++i) y = y + static_cast<float>(static_cast<double>(scale));
    return y;
  });
  const auto x = input(dev, Shape{2}, 1);
  const std::vector<float> xs = values(2, 1);
  expect_values(f(x, 1.5), {xs[0] + 1.5f + 1.5f + 1.5f, xs[1] + 1.5f + 1.5f + 1.5f});
  expect_values(f(x, 1.5), {xs[0] + 1.5f + 1.5f + 1.5f, xs[1] + 1.5f + 1.5f + 1.5f});
  expect_values(f(x, 0.5), {xs[0] + 0.5f, xs[1] + 0.5f});
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_TRUE(has_line(f.explain(), "arg0 == 1.5")) << f.explain();
  EXPECT_TRUE(has_line(f.explain(), "arg0 * 2 == 3")) << f.explain();
}

TEST_P(SymFloatProgram, GuardsPrintSimplified) {
  auto f = ferry::jit([](DeviceArray<float> x, SymInt k) {
    // numel * 8 bytes on a 16-byte boundary: Shape::size() starts its product from 1.
    if ((x.shape().size() * 8) % 16 == 0) return x * 2.0f;
    if ((k + 0) * 1 + 2 * k - 3 > 6 + 0 * k) return x + 1.0f;
    return x;
  });
  ferry::wait(f(input(dev, Shape{4}, 1), 0));
  ferry::wait(f(input(dev, Shape{3}, 1), 5));
  ferry::wait(f(input(dev, Shape{5}, 1), 1));
  const std::vector<std::string> lines = indented(f.explain());
  const std::vector<std::string> guards = {"in0.shape[0] % 2 == 0", "in0.shape[0] % 2 != 0",
                                           "arg0 * 3 - 3 > 6", "arg0 * 3 - 3 <= 6"};
  for (const std::string& g : guards)
    EXPECT_TRUE(has_line(f.explain(), g)) << g << "\n" << f.explain();
  for (const std::string& l : lines) {
    EXPECT_EQ(l.find("1 *"), std::string::npos) << l;
    EXPECT_EQ(l.find("+ 0"), std::string::npos) << l;
  }
  EXPECT_EQ(f.cache_size(), 3u) << f.explain();
}

TEST_P(SymFloatProgram, OpParametersPrintSimplifiedToo) {
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat s) {
    return ferry::full<float>(x.device(), Shape{x.shape()[0] * 2 - 1}, s * 0.5 + 1);
  });
  ferry::wait(f(input(dev, Shape{3}, 1), 4.0));
  EXPECT_TRUE(has_line(f.explain(), "v1 = full(in0.shape[0] * 2 - 1, arg0 * 0.5 + 1)"))
      << f.explain();
}

TEST_P(SymFloatProgram, ASymFloatKeptPastItsTraceIsAConstant) {
  SymFloat kept;
  auto f = ferry::jit([&kept](DeviceArray<float> x, SymFloat s) {
    kept = s * 2;
    return x * s;
  });
  ferry::wait(f(input(dev, Shape{2}, 1), 0.5));
  EXPECT_FALSE(kept.symbolic());
  EXPECT_EQ(static_cast<double>(kept + 1), 2.0);
  EXPECT_TRUE(kept > 0.5);
}

// ---- gradients: a SymFloat is a constant of the gradient ----

TEST_P(SymFloatProgram, GradientsThroughScalarOpsUseTheScalarsValue) {
  const auto x = input(dev, Shape{5}, 3);
  const std::vector<float> xs = values(5, 3);
  const SymFloat s = 0.5;
  const auto g = ferry::grad([&](const DeviceArray<float>& a) {
    return ferry::sum(a * s + s / (a * a + 1.0f) - ferry::clip(a, SymFloat(-1), SymFloat(1)));
  })(x);
  const std::vector<float> got = host(g);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double a = xs[i];
    const double inside = a > -1 && a < 1 ? 1 : (a == -1 || a == 1 ? 0.5 : 0);
    const double want = 0.5 - 0.5 * 2 * a / ((a * a + 1) * (a * a + 1)) - inside;
    EXPECT_NEAR(got[i], want, 1e-5) << i;
  }
}

TEST_P(SymFloatProgram, AGradientInsideAProgramReadsEachCallsScalar) {
  auto step = ferry::jit([](DeviceArray<float> w, DeviceArray<float> x, SymFloat lr, SymFloat lo) {
    auto loss = [&](const DeviceArray<float>& v) {
      return ferry::sum(ferry::maximum(v * x, lo) / lr);
    };
    auto [value, g] = ferry::value_and_grad(loss)(w);
    return std::pair{value, w - lr * g};
  });
  const auto w = input(dev, Shape{6}, 1);
  const auto x = input(dev, Shape{6}, 2);
  const std::vector<float> ws = values(6, 1);
  const std::vector<float> xs = values(6, 2);
  for (auto [lr, lo] : {std::pair{0.5, 0.0}, std::pair{0.25, -1.0}, std::pair{2.0, 0.3}}) {
    SCOPED_TRACE(lr);
    auto [value, updated] = step(w, x, lr, lo);
    double want_value = 0;
    std::vector<float> got = host(updated);
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const double p = static_cast<double>(ws[i]) * xs[i];
      want_value += std::max(p, lo) / lr;
      const double slope = p > lo ? 1 : (p == lo ? 0.5 : 0);
      const double grad = slope * xs[i] / lr;
      EXPECT_NEAR(got[i], ws[i] - lr * grad, 1e-5) << i;
    }
    EXPECT_NEAR(value.item(), want_value, 1e-4);
  }
  EXPECT_EQ(step.cache_size(), 1u) << step.explain();
  EXPECT_EQ(step.cache_hits(), 2u);
}

TEST_P(SymFloatProgram, PowsGradientGuardsItsExponent) {
  // pow's rule needs the exponent's value (log, v - 1 in T): the trace holds for that value.
  auto f = ferry::jit([](DeviceArray<float> x, SymFloat p) {
    return ferry::grad([&](const DeviceArray<float>& a) { return ferry::sum(ferry::pow(a, p)); })(
        x);
  });
  const auto x = ferry::to_device(dev, std::vector<float>{1.5f, 2.0f}, Shape{2});
  for (double p : {2.0, 3.0, 2.0}) {
    const std::vector<float> got = host(f(x, p));
    EXPECT_NEAR(got[0], p * std::pow(1.5, p - 1), 1e-5);
    EXPECT_NEAR(got[1], p * std::pow(2.0, p - 1), 1e-5);
  }
  EXPECT_EQ(f.cache_size(), 2u) << f.explain();
  EXPECT_TRUE(has_line(f.explain(), "arg0 == 2")) << f.explain();
}

}  // namespace

}  // namespace test_sym_float
