// Reverse mode: every op's gradient against central finite differences in float64 (relative
// error at most 1e-6) on random shapes with broadcasting, size-1 and empty dimensions; the same
// through jit; higher order; gradients across devices; the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/gradcheck.hpp"
#include "support/memory.hpp"
#include "support/timeline.hpp"

namespace test_grad {

namespace {

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary

class Grad : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, Grad, ::testing::Values(0, 2), ferry_test::executor_name);

// ---- elementwise ----

TEST_P(Grad, UnaryOpsMatchFiniteDifferences) {
  for (int trial = 0; trial < 6; ++trial) {
    const Shape s = random_shape(trial == 5);
    SCOPED_TRACE(s.to_string());
    const Input x = draw(s);
    const Input pos = draw(s, 0.2, 3);
    check(dev, [](const D& a) { return weighed(ferry::neg(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::abs(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::relu(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::exp(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::log(a)); }, pos);
    check(dev, [](const D& a) { return weighed(ferry::sqrt(a)); }, pos);
    check(dev, [](const D& a) { return weighed(ferry::sigmoid(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::tanh(a)); }, x);
    check(dev, [](const D& a) { return weighed(ferry::gelu(a)); }, x);
    check(dev, [](const D& a) { return weighed(-a); }, x);
  }
}

TEST_P(Grad, BinaryOpsSumTheBroadcastDimensionsBack) {
  for (int trial = 0; trial < 8; ++trial) {
    Shape sa = random_shape(trial == 7);
    Shape sb = broadcast_partner(sa);
    if (trial % 2 == 1) std::swap(sa, sb);
    SCOPED_TRACE(sa.to_string() + " with " + sb.to_string());
    const Input a = draw(sa);
    const Input b = draw(sb);
    const Input pa = draw(sa, 0.3, 2);
    check(dev, [](const D& x, const D& y) { return weighed(x + y); }, a, b);
    check(dev, [](const D& x, const D& y) { return weighed(x - y); }, a, b);
    check(dev, [](const D& x, const D& y) { return weighed(x * y); }, a, b);
    check(dev, [](const D& x, const D& y) { return weighed(x / y); }, a, b);
    check(dev, [](const D& x, const D& y) { return weighed(ferry::maximum(x, y)); }, a, b);
    check(dev, [](const D& x, const D& y) { return weighed(ferry::minimum(x, y)); }, a, b);
    check(dev, [](const D& x, const D& y) { return weighed(ferry::pow(x, y)); }, pa, b);
  }
}

TEST_P(Grad, OpsWithAScalarOnEitherSide) {
  const Input x = draw(Shape{2, 3});
  const Input pos = draw(Shape{2, 3}, 0.3, 2);
  check(dev, [](const D& a) { return weighed(a + 1.5); }, x);
  check(dev, [](const D& a) { return weighed(2.5 - a); }, x);
  check(dev, [](const D& a) { return weighed(a - 2.5); }, x);
  check(dev, [](const D& a) { return weighed(3.0 * a); }, x);
  check(dev, [](const D& a) { return weighed(a / 4.0); }, x);
  check(dev, [](const D& a) { return weighed(4.0 / a); }, x);
  check(dev, [](const D& a) { return weighed(ferry::maximum(a, 0.5)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::minimum(-0.5, a)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::pow(a, 3.0)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::pow(a, 0.0)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::pow(a, -1.5)); }, pos);
  check(dev, [](const D& a) { return weighed(ferry::pow(2.0, a)); }, x);
}

TEST_P(Grad, TiesOfMaximumSplitTheCotangent) {
  const auto a = ferry::to_device(dev, {1.0, 2.0, 3.0}, Shape{3});
  const auto b = ferry::to_device(dev, {1.0, 5.0, 0.0}, Shape{3});
  auto [v, ga, gb] = ferry::value_and_grad(
      [](const D& x, const D& y) { return ferry::sum(ferry::maximum(x, y)); })(a, b);
  EXPECT_EQ(host(ga), (std::vector<double>{0.5, 0, 1}));
  EXPECT_EQ(host(gb), (std::vector<double>{0.5, 1, 0}));
}

TEST_P(Grad, WhereSendsEachSideItsElements) {
  const Input a = draw(Shape{2, 3});
  const Input b = draw(Shape{3});
  const auto mask = ferry::to_device(dev, std::vector<bool>{true, false, true, false, false, true},
                                     Shape{2, 3});
  check(dev, [&](const D& x, const D& y) { return weighed(ferry::where(mask, x, y)); }, a, b);
  check(dev, [&](const D& x) { return weighed(ferry::where(mask, x, 0.25)); }, a);
  check(dev, [&](const D& y) { return weighed(ferry::where(mask, 0.25, y)); }, b);
  // A mask computed from the variable has no gradient of its own: x only flows through the
  // chosen elements.
  check(
      dev, [](const D& x) { return weighed(ferry::where(ferry::greater(x, 0.0), x * x, -x)); }, a);
}

TEST_P(Grad, BroadcastToAndAstype) {
  const Input a = draw(Shape{3, 1});
  check(dev, [](const D& x) { return weighed(ferry::broadcast_to(x, Shape{2, 3, 4})); }, a);
  // Through float32 and back: the cotangent is converted back exactly.
  const auto x = ferry::to_device(dev, {1.0f, -2.0f}, Shape{2});
  const auto w = ferry::to_device(dev, {0.5, 3.0}, Shape{2});
  const auto dx = ferry::grad([&](const ferry::DeviceArray<float>& v) {
    return ferry::sum(v.astype<double>() * w);
  })(x);
  const auto h = dx.to_host();
  EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()), (std::vector<float>{0.5f, 3.0f}));
}

// ---- reductions, softmax, matmul ----

TEST_P(Grad, ReductionsOverAnyAxes) {
  const Input x = draw(Shape{2, 3, 4});
  const std::vector<std::vector<int>> axes_sets{{}, {0}, {1}, {-1}, {0, 2}, {1, 2}};
  for (const auto& axes : axes_sets) {
    for (bool keep : {false, true}) {
      SCOPED_TRACE(std::to_string(axes.size()) + " axes, keepdims " + std::to_string(keep));
      check(dev, [&](const D& a) { return weighed(ferry::sum(a, axes, keep)); }, x);
      check(dev, [&](const D& a) { return weighed(ferry::mean(a, axes, keep)); }, x);
      check(dev, [&](const D& a) { return weighed(ferry::max(a, axes, keep)); }, x);
      check(dev, [&](const D& a) { return weighed(ferry::min(a, axes, keep)); }, x);
    }
  }
  // Empty extents: nothing to differentiate, shapes still right.
  check(dev, [](const D& a) { return weighed(ferry::sum(a, {1})); }, draw(Shape{2, 0}));
  check(dev, [](const D& a) { return ferry::sum(a); }, draw(Shape{0, 3}));
}

TEST_P(Grad, TiesOfMaxShareTheCotangentEqually) {
  const auto x = ferry::to_device(dev, {1.0, 3.0, 3.0, 2.0}, Shape{4});
  EXPECT_EQ(host(ferry::grad([](const D& a) { return ferry::max(a); })(x)),
            (std::vector<double>{0, 0.5, 0.5, 0}));
}

TEST_P(Grad, SoftmaxAlongEitherAxis) {
  const Input x = draw(Shape{3, 4});
  check(dev, [](const D& a) { return weighed(ferry::softmax(a, 0)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::softmax(a, -1)); }, x);
}

TEST_P(Grad, MatmulOfMatricesVectorsAndBroadcastStacks) {
  const std::vector<std::pair<Shape, Shape>> cases{{Shape{2, 3}, Shape{3, 4}},
                                                   {Shape{3}, Shape{3, 4}},
                                                   {Shape{2, 3}, Shape{3}},
                                                   {Shape{3}, Shape{3}},
                                                   {Shape{2, 2, 3}, Shape{3, 4}},
                                                   {Shape{3, 2}, Shape{2, 2, 4}},
                                                   {Shape{2, 1, 2, 3}, Shape{3, 3, 2}},
                                                   {Shape{0, 3}, Shape{3, 2}},
                                                   {Shape{2, 0}, Shape{0, 2}}};
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(sa.to_string() + " @ " + sb.to_string());
    check(
        dev, [](const D& a, const D& b) { return weighed(ferry::matmul(a, b)); }, draw(sa),
        draw(sb));
  }
}

// ---- moving values ----

TEST_P(Grad, ShapeOps) {
  const Input x = draw(Shape{2, 3, 2});
  check(dev, [](const D& a) { return weighed(ferry::reshape(a, Shape{3, 4})); }, x);
  check(dev, [](const D& a) { return weighed(ferry::permute(a, {2, 0, 1})); }, x);
  check(dev, [](const D& a) { return weighed(ferry::transpose(a)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::slice(a, 0, 1, 2)); }, x);  // a view
  check(dev, [](const D& a) { return weighed(ferry::slice(a, 1, 1, 3)); }, x);  // a copy
  check(dev, [](const D& a) { return weighed(ferry::slice(a, -1, 0, 0)); }, x);  // empty
  check(dev, [](const D& a) { return weighed(ferry::slice(a, 1, -2, -1)); }, x);  // from the end
  check(dev, [](const D& a) { return weighed(ferry::swapaxes(a, 0, -1)); }, x);
  check(dev, [](const D& a) { return weighed(ferry::squeeze(ferry::slice(a, 1, -1, 3))); }, x);
  check(dev, [](const D& a) {
    const auto parts = ferry::split(a, std::vector<std::int64_t>{1, 2}, 1);
    return weighed(parts[1]) + ferry::sum(parts[0] * parts[0]);
  }, x);
  check(
      dev,
      [](const D& a, const D& b, const D& c) {
        return weighed(ferry::concat({a, b, c}, 1));
      },
      draw(Shape{2, 1}), draw(Shape{2, 3}), draw(Shape{2, 0}));
  check(
      dev, [](const D& dst, const D& src) { return weighed(ferry::update_slice(dst, src, 1, 1)); },
      draw(Shape{2, 4}), draw(Shape{2, 2}));
}

TEST_P(Grad, LayoutChangesGiveGradientsInTheArgumentsLayout) {
  const Input x = draw(Shape{3, 5});
  const ferry::Layout tiled{ferry::MemorySpace::dram, ferry::Order::tiled};
  check(dev, [&](const D& a) { return weighed(ferry::to_layout(a, tiled) * 2.0); }, x);
  const D xt = ferry::to_device(dev, x.values, x.shape, tiled);
  const D g = ferry::grad([](const D& a) { return weighed(ferry::exp(a)); })(xt);
  EXPECT_EQ(g.layout(), tiled);
  std::vector<double> want;
  for (std::size_t i = 0; i < x.values.size(); ++i) {
    want.push_back(std::exp(x.values[i]) * (0.5 + 0.25 * static_cast<double>(i % 7)));
  }
  const std::vector<double> got = host(g);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * want[i]);
}

TEST_P(Grad, AGradientNothingReachesIsZerosInTheArgumentsLayout) {
  const Input x = draw(Shape{2, 2});
  const ferry::Layout tiled{ferry::MemorySpace::dram, ferry::Order::tiled};
  const ferry::Layout l1{ferry::MemorySpace::l1, ferry::Order::row_major};
  const D a = ferry::to_device(dev, x.values, x.shape);
  const D t = ferry::to_device(dev, x.values, x.shape, tiled);
  const D s = ferry::to_device(dev, x.values, x.shape, l1);
  auto [value, ga, gt, gs] = ferry::value_and_grad(
      [](const D& p, const D&, const D&) { return ferry::sum(p * p); })(a, t, s);
  EXPECT_EQ(gt.layout(), tiled);
  EXPECT_EQ(gs.layout(), l1);
  for (const double v : host(gt)) EXPECT_EQ(v, 0.0);
  for (const double v : host(gs)) EXPECT_EQ(v, 0.0);
}

TEST_P(Grad, AnArrayUsedTwiceGetsBothContributions) {
  check(dev, [](const D& a) { return weighed(a * a + ferry::exp(a) * a); }, draw(Shape{4}));
}

TEST_P(Grad, ACompositeNetwork) {
  check(dev,
        [](const D& x, const D& w, const D& b) {
          const D h = ferry::tanh(ferry::matmul(x, w) + b);
          return ferry::mean(ferry::log(ferry::softmax(h, -1)) * -1.0);
        },
        draw(Shape{4, 3}), draw(Shape{3, 5}), draw(Shape{5}));
}

// ---- the API ----

TEST_P(Grad, ValueAndGradPicksArgumentsByPosition) {
  const auto x = on(dev, draw(Shape{3}));
  const auto y = on(dev, draw(Shape{3}));
  const auto z = on(dev, draw(Shape{3}));
  auto f = [](const D& a, const D& b, const D& c) { return ferry::sum(a * b * c); };
  auto [v, grads] = ferry::value_and_grad(f, {2, 0})(x, y, z);
  ASSERT_EQ(grads.size(), 2u);
  const auto [all_v, gx, gy, gz] = ferry::value_and_grad(f)(x, y, z);
  EXPECT_EQ(host(grads[0]), host(gz));
  EXPECT_EQ(host(grads[1]), host(gx));
  EXPECT_EQ(host(ferry::grad(f, {1})(x, y, z)[0]), host(gy));
  EXPECT_THROW(ferry::value_and_grad(f, {3})(x, y, z), ferry::InvalidArgument);
  EXPECT_THROW(ferry::value_and_grad(f, {1, 1})(x, y, z), ferry::InvalidArgument);
}

TEST_P(Grad, NonArrayAndIntegerArgumentsAreConstants) {
  const auto x = on(dev, draw(Shape{3}));
  const auto labels = ferry::to_device(dev, std::vector<std::int64_t>{0, 2, 1}, Shape{3});
  auto f = [](const D& a, const ferry::DeviceArray<std::int64_t>& l, int scale) {
    return ferry::sum(a * l.astype<double>() * static_cast<double>(scale));
  };
  const D g = ferry::grad(f)(x, labels, 2);  // one floating array: the gradient alone
  EXPECT_EQ(host(g), (std::vector<double>{0, 4, 2}));
}

// As PyTorch's autograd, the gradient follows the array, not the handle f reaches it by: a
// captured handle of the argument's own array is the variable (d/dv sum(v * v) = 2v), as is an
// argument not picked that is the same array as a picked one; a new array of its values is a
// constant (d/dv sum(v * c) = c).
TEST_P(Grad, ACapturedHandleOfAVariableIsThatVariable) {
  const auto x = ferry::to_device(dev, std::vector<double>{1, 2, 3}, Shape{3});
  EXPECT_EQ(host(ferry::grad([&](const D& v) { return ferry::sum(v * x); })(x)),
            (std::vector<double>{2, 4, 6}));
  const D held = x * 1.0;
  EXPECT_EQ(host(ferry::grad([&](const D& v) { return ferry::sum(v * held); })(x)),
            (std::vector<double>{1, 2, 3}));
  auto f = [](const D& a, const D& b) { return ferry::sum(a * b); };
  EXPECT_EQ(host(ferry::grad(f, {0})(x, x)[0]), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(host(ferry::grad(f, {0})(x, held)[0]), (std::vector<double>{1, 2, 3}));
}

TEST_P(Grad, VjpOfANonScalarOutput) {
  const Input x = draw(Shape{2, 3});
  const auto xs = on(dev, x);
  const auto ct = weights(dev, Shape{3, 2});
  auto f = [](const D& a) { return ferry::transpose(ferry::exp(a)); };
  auto [y, dx] = ferry::vjp(f, xs, ct);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  // vjp with cotangent c equals the gradient of sum(f(x) * c).
  EXPECT_EQ(host(dx), host(ferry::grad([&](const D& a) { return ferry::sum(f(a) * ct); })(xs)));
  EXPECT_THROW(ferry::vjp(f, xs, weights(dev, Shape{2, 3})), ferry::ShapeError);
}

TEST_P(Grad, AValueThatDoesNotDependOnAnArgumentGivesZeros) {
  const auto x = on(dev, draw(Shape{2}));
  const auto y = on(dev, draw(Shape{3}));
  auto [v, gx, gy] =
      ferry::value_and_grad([](const D& a, const D&) { return ferry::sum(a); })(x, y);
  EXPECT_EQ(host(gy), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(host(gx), (std::vector<double>{1, 1}));
}

TEST_P(Grad, BadCallsThrowTypedErrors) {
  const auto x = on(dev, draw(Shape{3}));
  EXPECT_THROW(ferry::grad([](const D& a) { return a * 2.0; })(x), ferry::InvalidArgument);
  EXPECT_THROW(ferry::grad([](const D& a) { return ferry::sum(a); })(D{}), ferry::InvalidArgument);
  // Through a custom step without a backward rule: no gradient is defined.
  auto copy = [](ferry::KernelArgs<double> k) {
    std::copy(k.inputs[0].begin(), k.inputs[0].end(), k.output.begin());
  };
  try {
    ferry::grad([&](const D& a) {
      return ferry::sum(
          ferry::custom<double>(a.device(), "my_copy", {a}, a.shape(), copy, ferry::Cost{}));
    })(x);
    FAIL() << "expected NotDifferentiable";
  } catch (const ferry::NotDifferentiable& e) {
    EXPECT_NE(std::string(e.what()).find("my_copy"), std::string::npos) << e.what();
  }
}

TEST_P(Grad, MasksIndicesAndIntegerCastsAreConstantsOfTheGradient) {
  // As in JAX and PyTorch: d/dv sum(v * (v > 0)) = (v > 0), for v = [-1, 2, -3, 4].
  const auto v = ferry::to_device(dev, {-1.0, 2.0, -3.0, 4.0}, Shape{4});
  const auto masked = [](const D& a) {
    return ferry::sum(a * ferry::greater(a, 0.0).astype<double>());
  };
  EXPECT_EQ(host(ferry::grad(masked)(v)), (std::vector<double>{0, 1, 0, 1}));
  // An argmax-weighted term: the index (3) is a constant.
  const auto weighted = [](const D& a) {
    return ferry::sum(a * ferry::argmax(a, 0).astype<double>());
  };
  EXPECT_EQ(host(ferry::grad(weighted)(v)), (std::vector<double>{3, 3, 3, 3}));
  // A cast to an integer and back: the truncated values are constants.
  const auto truncated = [](const D& a) {
    return ferry::sum(a * (a * 1.5).astype<std::int32_t>().astype<double>());
  };
  EXPECT_EQ(host(ferry::grad(truncated)(v)), (std::vector<double>{-1, 3, -4, 6}));
  // A value that depends on the argument only through such ops: zeros.
  const auto only_mask = [](const D& a) {
    return ferry::sum(ferry::less(a, 0.0).astype<double>());
  };
  EXPECT_EQ(host(ferry::grad(only_mask)(v)), (std::vector<double>{0, 0, 0, 0}));
  // And in float, through where with a mask made from the data.
  const auto f = ferry::to_device(dev, {-1.0f, 2.0f, -3.0f, 4.0f}, Shape{4});
  const auto relu_like = [](const ferry::DeviceArray<float>& a) {
    return ferry::sum(ferry::where(ferry::greater(a, 0.0f), a * a, a * 0.0f));
  };
  const ferry::HostArray<float> g = ferry::grad(relu_like)(f).to_host();
  EXPECT_EQ(std::vector<float>(g.data().begin(), g.data().end()), (std::vector<float>{0, 4, 0, 8}));
}

TEST_P(Grad, CustomStepsTakeABackwardRule) {
  auto square = [](ferry::KernelArgs<double> k) {
    for (std::size_t i = 0; i < k.output.size(); ++i) k.output[i] = k.inputs[0][i] * k.inputs[0][i];
  };
  auto backward = [](const std::vector<D>& in, const D&, const D& g) {
    return std::vector<D>{g * in[0] * 2.0};
  };
  check(
      dev,
      [&](const D& a) {
        return weighed(ferry::custom<double>(a.device(), "square", {a}, a.shape(), square,
                                             ferry::Cost{}, backward));
      },
      draw(Shape{5}));
  auto wrong = [](const std::vector<D>& in, const D&, const D&) {
    return std::vector<D>{ferry::sum(in[0], {}, true)};
  };
  const auto x = on(dev, draw(Shape{5}));
  EXPECT_THROW(ferry::grad([&](const D& a) {
                 return ferry::sum(ferry::custom<double>(a.device(), "square", {a}, a.shape(),
                                                         square, ferry::Cost{}, wrong));
               })(x),
               ferry::ShapeError);
}

TEST_P(Grad, SecondOrderOfElementwiseOps) {
  // d/dx of grad(f) at each x, against differences of grad(f) itself.
  auto second = [&](auto f, double lo, double hi) {
    const Input x = draw(Shape{}, lo, hi);
    auto g = ferry::grad(f);
    const double gg = scalar(ferry::grad(g)(on(dev, x)));
    const double h = 1e-5;
    const double up = scalar(g(ferry::to_device(dev, {x.values[0] + h}, Shape{})));
    const double down = scalar(g(ferry::to_device(dev, {x.values[0] - h}, Shape{})));
    EXPECT_NEAR(gg, (up - down) / (2 * h), 1e-6 * std::max(1.0, std::abs(gg)));
  };
  second([](const D& a) { return a * a * a; }, -2, 2);
  second([](const D& a) { return ferry::exp(a * 2.0); }, -1, 1);
  second([](const D& a) { return ferry::tanh(a); }, -2, 2);
  second([](const D& a) { return ferry::sigmoid(a); }, -2, 2);
  second([](const D& a) { return ferry::log(a); }, 0.5, 2);
  second([](const D& a) { return ferry::sqrt(a); }, 0.5, 2);
  second([](const D& a) { return 1.0 / a; }, 0.5, 2);
  second([](const D& a) { return ferry::gelu(a); }, -2, 2);
  second([](const D& a) { return ferry::pow(a, 3.5); }, 0.5, 2);
  // Third order: d^3/dx^3 x^4 = 24 x.
  const D x = ferry::to_device(dev, {1.5}, Shape{});
  EXPECT_NEAR(
      scalar(ferry::grad(ferry::grad(ferry::grad([](const D& a) { return a * a * a * a; })))(x)),
      36, 1e-9);
}

TEST_P(Grad, ReturnsBeforeAnythingRuns) {
  // On the stepped executor nothing runs until an export drives it.
  const ferry::Device manual = ferry_test::make_device(0);
  const auto x = ferry::to_device(manual, {1.0, 2.0}, Shape{2});
  auto [v, g] = ferry::value_and_grad([](const D& a) { return ferry::sum(ferry::exp(a)); })(x);
  EXPECT_FALSE(v.ready());
  EXPECT_FALSE(g.ready());
  EXPECT_NEAR(host(g)[1], std::exp(2.0), 1e-12);
}

TEST_P(Grad, ThreadsDifferentiateAtOnce) {
  std::vector<std::thread> threads;
  std::vector<double> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto x = ferry::to_device(dev, {static_cast<double>(t)}, Shape{});
      double total = 0;
      for (int i = 0; i < 20; ++i)
        total += scalar(ferry::grad([](const D& a) { return a * a; })(x));
      results[static_cast<std::size_t>(t)] = total;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(results[static_cast<std::size_t>(t)], 40.0 * t);
}

TEST_P(Grad, GivingAnIntermediateAwayDoesNotCorruptTheGradient) {
  // Under a tape nothing is donated: the rule of exp reads the product's values.
  check(dev, [](const D& a) {
    D p = a * 2.0;
    D e = ferry::exp(p);
    return weighed(std::move(p) * e);
  }, draw(Shape{3}));
}

TEST_P(Grad, GradientsAreFreedWhenTheirHandlesGo) {
  const auto x = on(dev, draw(Shape{64}));
  ferry::wait(x);
  const std::size_t before =
      ferry_test::allocated_bytes_back_at(ferry::detail::Buffer::allocated_bytes());
  {
    auto [v, g] =
        ferry::value_and_grad([](const D& a) { return ferry::sum(ferry::tanh(a) * a); })(x);
    ferry::wait(v, g);
  }
  EXPECT_EQ(ferry_test::allocated_bytes_back_at(before), before);
}

// ---- through jit ----

TEST_P(Grad, ATracedGradientReplaysForNewSizes) {
  auto loss = [](const D& x, const D& w) { return ferry::mean(ferry::tanh(ferry::matmul(x, w))); };
  auto step = ferry::jit([&](D x, D w) {
    auto [v, gx, gw] = ferry::value_and_grad(loss)(x, w);
    return std::tuple{v, gx, gw};
  });
  const Input w = draw(Shape{3, 2});
  for (std::int64_t batch : {2, 4, 5}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const Input x = draw(Shape{batch, 3});
    auto [v, gx, gw] = step(on(dev, x), on(dev, w));
    EXPECT_DOUBLE_EQ(scalar(v), scalar(loss(on(dev, x), on(dev, w))));
    expect_matches_differences(dev, loss, std::array<Input, 2>{x, w}, std::array<D, 2>{gx, gw});
  }
  EXPECT_EQ(step.cache_size(), 1u);
  EXPECT_EQ(step.cache_hits(), 2u);
}

TEST_P(Grad, AProgramCalledUnderATapeRunsItsOpsOneByOne) {
  auto f = ferry::jit([](D a) { return ferry::exp(a) * a; });
  const D x = on(dev, draw(Shape{3}));
  ferry::wait(f(x));  // traced and cached
  const D g = ferry::grad([&](const D& a) { return ferry::sum(f(a)); })(x);
  const std::vector<double> xs = host(x);
  const std::vector<double> got = host(g);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(got[i], std::exp(xs[i]) * (1 + xs[i]), 1e-12 * std::abs(got[i]));
  }
  EXPECT_EQ(f.cache_hits(), 0u);  // the call under the tape did not replay
}

TEST_P(Grad, Float32AndBfloat16GradientsFollowTheSameRules) {
  const auto xf = ferry::to_device(dev, {0.5f, -1.0f, 2.0f}, Shape{3});
  const auto gf = ferry::grad([](const ferry::DeviceArray<float>& a) {
    return ferry::mean(ferry::tanh(a) * ferry::exp(a));
  })(xf);
  const auto hf = gf.to_host();
  for (std::size_t i = 0; i < 3; ++i) {
    const double x = std::vector<double>{0.5, -1.0, 2.0}[i];
    const double want =
        (std::exp(x) * (1 - std::tanh(x) * std::tanh(x)) + std::tanh(x) * std::exp(x)) / 3;
    EXPECT_NEAR(hf.data()[i], want, 1e-6 * std::abs(want) + 1e-7);
  }
  const auto xb = xf.astype<ferry::bfloat16>();
  const auto gb = ferry::grad([](const ferry::DeviceArray<ferry::bfloat16>& a) {
    return ferry::sum(a * a);
  })(xb);
  EXPECT_EQ(gb.dtype(), ferry::DType::bfloat16);
  const auto hb = gb.astype<float>().to_host();
  EXPECT_EQ(std::vector<float>(hb.data().begin(), hb.data().end()),
            (std::vector<float>{1.0f, -2.0f, 4.0f}));
}

TEST_P(Grad, Float16GradientsFollowTheSameRulesAsBfloat16) {
  // float16 is a floating type: every rule bfloat16 has applies, computed in float and rounded
  // once per op, and the gradients are float16 arrays.
  const auto x = ferry::to_device(dev, {0.5f, -1.0f, 2.0f}, Shape{3}).astype<ferry::float16>();
  const auto g = ferry::grad([](const ferry::DeviceArray<ferry::float16>& a) {
    return ferry::sum(a * a);
  })(x);
  EXPECT_EQ(g.dtype(), ferry::DType::float16);
  const auto h = g.astype<float>().to_host();
  EXPECT_EQ(std::vector<float>(h.data().begin(), h.data().end()),
            (std::vector<float>{1.0f, -2.0f, 4.0f}));
  const auto g2 = ferry::grad([](const ferry::DeviceArray<ferry::float16>& a) {
    return ferry::mean(ferry::tanh(a) * ferry::exp(a));
  })(x);
  const auto h2 = g2.astype<float>().to_host();
  for (std::size_t i = 0; i < 3; ++i) {
    const double v = std::vector<double>{0.5, -1.0, 2.0}[i];
    const double th = std::tanh(v);
    const double want = (std::exp(v) * (1 - th * th) + th * std::exp(v)) / 3;
    EXPECT_NEAR(h2.data()[i], want, 4e-3 * std::abs(want) + 1e-3) << i;  // a few float16 ulps
  }
}

// ---- the work a backward pass submits ----

TEST(GradWork, AMatmulOperandThatIsNoVariableGetsNoCotangent) {
  // matmul's rule computes dA = dC B^T only when A depends on a variable: with the data x fixed
  // and w the variable, the pass runs two products (the forward and dW = x^T dC), not three;
  // differentiating with respect to both, three. The loss is sum(x w), so dC is ones: dW[k][j]
  // is column k's sum of x, dX[i][k] row k's sum of w.
  const Input xi = draw(Shape{4, 3});
  const Input wi = draw(Shape{3, 2});
  auto loss = [](const D& a, const D& b) { return ferry::sum(ferry::matmul(a, b)); };
  const ferry::Device only_w = ferry::Device::modeled(ferry::specs::tiny());
  std::vector<double> gw;
  expect_balanced_after(only_w, [&] {
    gw = host(ferry::grad(loss, {1})(on(only_w, xi), on(only_w, wi))[0]);
  });
  EXPECT_EQ(named(slices_of(only_w), "matmul").size(), 2u);
  const ferry::Device both = ferry::Device::modeled(ferry::specs::tiny());
  std::vector<double> gw_both;
  std::vector<double> dx;
  expect_balanced_after(both, [&] {
    const auto [v, gx, g] = ferry::value_and_grad(loss)(on(both, xi), on(both, wi));
    gw_both = host(g);
    dx = host(gx);
  });
  EXPECT_EQ(named(slices_of(both), "matmul").size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    double column = 0;
    for (std::size_t i = 0; i < 4; ++i) column += xi.values[i * 3 + k];
    for (std::size_t j = 0; j < 2; ++j) EXPECT_NEAR(gw[k * 2 + j], column, 1e-12) << k << j;
  }
  EXPECT_EQ(gw_both, gw);
  for (std::size_t k = 0; k < 3; ++k) {
    const double row = wi.values[k * 2] + wi.values[k * 2 + 1];
    for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(dx[i * 3 + k], row, 1e-12) << i << k;
  }
}

// The engine slices (uploads and downloads left out) that the gradient of `loss` at (x, w) runs
// on a device of its own, with respect to w alone or to both, and the gradients. A difference
// in the names shows the kernels a rule skipped for an operand that reaches no variable.
struct GradPass {
  std::vector<std::string> names;
  std::vector<std::vector<double>> grads;
};

template <class Loss>
GradPass grad_pass(Loss loss, std::vector<int> wrt, const Input& xi, const Input& wi) {
  const ferry::Device dev = ferry::Device::modeled(ferry::specs::tiny());
  GradPass pass;
  expect_balanced_after(dev, [&] {
    for (const D& g : ferry::grad(loss, std::move(wrt))(on(dev, xi), on(dev, wi))) {
      pass.grads.push_back(host(g));
    }
  });
  for (const Slice& s : slices_of(dev)) {
    if (s.track != 0 && s.track != track_of("h2d") && s.track != track_of("d2h")) {
      pass.names.emplace_back(s.name);
    }
  }
  std::sort(pass.names.begin(), pass.names.end());
  return pass;
}

/// The slices of `more` that `fewer` lacks, as a sorted multiset difference.
std::vector<std::string> extra_names(const GradPass& more, const GradPass& fewer) {
  std::vector<std::string> extra;
  std::set_difference(more.names.begin(), more.names.end(), fewer.names.begin(),
                      fewer.names.end(), std::back_inserter(extra));
  return extra;
}

/// sum_i P[i][j] for P = softmax(x x^T / sqrt(3)) by rows, x (4, 3) row-major.
double attention_column(const std::vector<double>& x, std::size_t j) {
  double column = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    std::array<double, 4> s{};
    for (std::size_t l = 0; l < 4; ++l) {
      for (std::size_t d = 0; d < 3; ++d) s[l] += x[i * 3 + d] * x[l * 3 + d] / std::sqrt(3.0);
    }
    const double top = *std::max_element(s.begin(), s.end());
    double total = 0;
    for (const double v : s) total += std::exp(v - top);
    column += std::exp(s[j] - top) / total;
  }
  return column;
}

TEST(GradWork, OperandsThatAreNoVariableGetNoCotangent) {
  // x is data, w the variable. With respect to w alone each rule skips x's cotangent: the
  // kernels named below, worked out from the rules, are the ones differentiating with respect
  // to both adds; w's gradient is the same to the bit either way, and a plain loop's.
  const Input xi = draw(Shape{4, 3});
  const Input wi = draw(Shape{4, 3});
  const Input row = draw(Shape{3});
  struct Case {
    std::string name;
    std::function<D(const D&, const D&)> loss;
    const Input* data;  // x
    std::vector<std::string> skipped;  // sorted
    std::function<double(std::size_t)> dw;  // d loss / d w[i]
  };
  const auto& x = xi.values;
  const auto& w = wi.values;
  const std::vector<Case> cases = {
      {"multiply", [](const D& a, const D& b) { return ferry::sum(a * b); }, &xi, {"multiply"},
       [&](std::size_t i) { return x[i]; }},
      {"divide", [](const D& a, const D& b) { return ferry::sum(a / b); }, &xi, {"divide"},
       [&](std::size_t i) { return -x[i] / (w[i] * w[i]); }},
      {"subtract", [](const D& a, const D& b) { return ferry::sum(b - a); }, &xi, {"neg"},
       [](std::size_t) { return 1.0; }},
      {"maximum", [](const D& a, const D& b) { return ferry::sum(ferry::maximum(a, b)); }, &xi,
       {"greater", "where"}, [&](std::size_t i) { return w[i] > x[i] ? 1.0 : 0.0; }},
      {"minimum", [](const D& a, const D& b) { return ferry::sum(ferry::minimum(a, b)); }, &xi,
       {"less", "where"}, [&](std::size_t i) { return w[i] < x[i] ? 1.0 : 0.0; }},
      {"where",
       [](const D& a, const D& b) {
         return ferry::sum(ferry::where(ferry::greater(a, 0.0), a, b));
       },
       &xi, {"where"}, [&](std::size_t i) { return x[i] > 0 ? 0.0 : 1.0; }},
      {"broadcast add", [](const D& a, const D& b) { return ferry::sum(a + b); }, &row, {"sum"},
       [](std::size_t) { return 1.0; }},
      {"concat", [](const D& a, const D& b) { return ferry::sum(ferry::concat({a, b}, 1)); },
       &xi, {"slice"}, [](std::size_t) { return 1.0; }},
      // x the queries and the keys, w the values: dV = P^T g needs no dS, so dP = g V^T (with
      // V^T), dS = P (dP - rowsum(dP P)), dQ, dK (each scaled, dS^T for dK) and their sum into
      // x are skipped. dV[j][d] = sum_i P[i][j].
      {"attention",
       [](const D& a, const D& b) {
         return ferry::sum(ferry::scaled_dot_product_attention(a, a, b));
       },
       &xi,
       {"add", "matmul", "matmul", "matmul", "multiply", "multiply", "multiply", "multiply",
        "subtract", "sum", "swapaxes", "swapaxes"},
       [&](std::size_t i) { return attention_column(x, i / 3); }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const GradPass only_w = grad_pass(k.loss, {1}, *k.data, wi);
    const GradPass both = grad_pass(k.loss, {0, 1}, *k.data, wi);
    EXPECT_EQ(extra_names(both, only_w), k.skipped);
    EXPECT_TRUE(extra_names(only_w, both).empty());
    ASSERT_EQ(only_w.grads.size(), 1u);
    ASSERT_EQ(both.grads.size(), 2u);
    EXPECT_EQ(only_w.grads[0], both.grads[1]);
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(only_w.grads[0][i], k.dw(i), 1e-12 * (1 + std::abs(k.dw(i)))) << i;
    }
  }
}

// ---- across devices ----

TEST(GradAcrossDevices, ALossOnTheHostSendsItsGradientBackOverTheCopyInEngine) {
  const ferry::Device acc = ferry::Device::modeled(ferry::specs::tiny());
  const ferry::Device cpu = ferry::Device::cpu();
  const Input xi = draw(Shape{4});
  const D x = on(acc, xi);
  auto f = [&](const D& a) {
    const D y = ferry::exp(a);                  // on the accelerator
    return ferry::sum(y.to(cpu) * y.to(cpu));   // the loss on the host
  };
  auto [v, g] = ferry::value_and_grad(f)(x);
  EXPECT_EQ(g.device(), acc);
  EXPECT_EQ(v.device(), cpu);
  const std::vector<double> got = host(g);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], 2 * std::exp(2 * xi.values[i]), 1e-9 * got[i]);
  }
  // Both uses of y.to(cpu) leave over the d2h engine and send their cotangent back over the
  // h2d engine: two copies each way.
  std::size_t out = 0;
  std::size_t in = 0;
  for (const ferry_test::Slice& s : ferry_test::named(ferry_test::slices_of(acc), "to")) {
    out += s.track == ferry_test::track_of("d2h") ? 1 : 0;
    in += s.track == ferry_test::track_of("h2d") ? 1 : 0;
  }
  EXPECT_EQ(out, 2u);
  EXPECT_EQ(in, 2u);
}

}  // namespace

}  // namespace test_grad
