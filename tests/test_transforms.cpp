// The transform conveniences: value_and_grad with has_aux (an array, a tuple or a number carried
// out beside the loss, never differentiated), nn::value_and_grad with has_aux, vjp of a function
// returning a tuple of arrays, and std::vector arguments as run-time lists of variables; values
// and gradients against hand-worked ones, and the errors by exact type and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/devices.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"

namespace test_transforms {

namespace {

using namespace ferry_test;  // NOLINT: the gradient-check vocabulary
using F32 = ferry::DeviceArray<float>;
namespace nn = ferry::nn;

class Transforms : public ferry_test::OnEachExecutor {};
INSTANTIATE_TEST_SUITE_P(Executors, Transforms, ::testing::Values(0, 2), ferry_test::executor_name);

/// A rank-1 array of `values` on `dev`.
D vec(const ferry::Device& dev, std::vector<double> values) {
  const auto n = static_cast<std::int64_t>(values.size());
  return ferry::to_device(dev, std::move(values), Shape{n});
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

// ---- has_aux ----

TEST_P(Transforms, HasAuxCarriesAnArrayOutBesideTheLoss) {
  const D x = vec(dev, {1, -2, 3});
  // aux depends on x, but is not differentiated: the gradient is that of the loss alone, 2x.
  auto f = [](const D& a) { return std::pair{ferry::sum(a * a), a + 1.0}; };
  auto [loss, aux, g] = ferry::value_and_grad(f, ferry::has_aux)(x);
  static_assert(std::is_same_v<decltype(aux), D>);
  EXPECT_EQ(scalar(loss), 14.0);
  EXPECT_EQ(host(aux), (std::vector<double>{2, -1, 4}));
  EXPECT_EQ(host(g), (std::vector<double>{2, -4, 6}));
  EXPECT_EQ(host(g), host(ferry::grad([](const D& a) { return ferry::sum(a * a); })(x)));
  // A std::tuple of two is taken as {loss, aux} too.
  auto as_tuple = [](const D& a) { return std::tuple{ferry::sum(a * a), a + 1.0}; };
  auto [loss2, aux2, g2] = ferry::value_and_grad(as_tuple, ferry::has_aux)(x);
  EXPECT_EQ(scalar(loss2), 14.0);
  EXPECT_EQ(host(aux2), (std::vector<double>{2, -1, 4}));
  EXPECT_EQ(host(g2), (std::vector<double>{2, -4, 6}));
}

TEST_P(Transforms, HasAuxCarriesATupleOrANumberOut) {
  const D x = vec(dev, {1, 2});
  const D w = vec(dev, {3, -1});
  auto f = [](const D& a, const D& b) {
    const D p = a * b;
    return std::pair{ferry::sum(p), std::tuple{p, ferry::exp(a), 7}};
  };
  auto [loss, aux, gx, gw] = ferry::value_and_grad(f, ferry::has_aux)(x, w);
  const auto& [p, e, seven] = aux;
  EXPECT_EQ(scalar(loss), 1.0);
  EXPECT_EQ(host(p), (std::vector<double>{3, -2}));
  expect_near(host(e), {std::exp(1.0), std::exp(2.0)});
  EXPECT_EQ(seven, 7);
  EXPECT_EQ(host(gx), (std::vector<double>{3, -1}));  // d/dx sum(x w) = w
  EXPECT_EQ(host(gw), (std::vector<double>{1, 2}));   // = x
  // A number as aux, beside an integer argument (a constant).
  auto scaled = [](const D& a, int k) {
    return std::pair{ferry::sum(a) * static_cast<double>(k), k + 1};
  };
  auto [loss2, n, ga] = ferry::value_and_grad(scaled, ferry::has_aux)(x, 2);
  EXPECT_EQ(scalar(loss2), 6.0);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(host(ga), (std::vector<double>{2, 2}));
}

TEST_P(Transforms, HasAuxWithPositions) {
  const D x = vec(dev, {1, 2});
  const D w = vec(dev, {3, -1});
  auto f = [](const D& a, const D& b) { return std::pair{ferry::sum(a * b * b), a * b}; };
  auto [loss, aux, grads] = ferry::value_and_grad(f, {1, 0}, ferry::has_aux)(x, w);
  static_assert(std::is_same_v<decltype(grads), std::vector<D>>);
  EXPECT_EQ(scalar(loss), 11.0);
  EXPECT_EQ(host(aux), (std::vector<double>{3, -2}));
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(host(grads[0]), (std::vector<double>{6, -4}));  // 2 x w
  EXPECT_EQ(host(grads[1]), (std::vector<double>{9, 1}));   // w^2
  // `{}` is still an empty list of positions, not has_aux.
  auto [v, none] =
      ferry::value_and_grad([](const D& a, const D& b) { return ferry::sum(a * b); }, {})(x, w);
  EXPECT_EQ(scalar(v), 1.0);
  EXPECT_TRUE(none.empty());
}

TEST_P(Transforms, HasAuxChecksTheLossAsWithoutIt) {
  const D x = vec(dev, {1, 2, 3});
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::value_and_grad([](const D& a) { return std::pair{a * 2.0, ferry::sum(a)}; },
                                     ferry::has_aux)(x);
      },
      "[value_and_grad] the function returned an array of shape (3): its value must be a "
      "scalar (rank 0); use vjp for other outputs");
  expect_error<ferry::InvalidArgument>(
      [&] {
        return ferry::value_and_grad([](const D& a) { return std::pair{ferry::sum(a), 1}; },
                                     ferry::has_aux)(D{});
      },
      "[value_and_grad] got an empty DeviceArray (default-constructed, moved from or deallocated)");
  // What f throws passes through.
  EXPECT_THROW(ferry::value_and_grad(
                   [&](const D& a) {
                     return std::pair{ferry::sum(a + vec(dev, {1, 2})), a};
                   },
                   ferry::has_aux)(x),
               ferry::ShapeError);
}

TEST(TransformsNn, HasAuxGivesTheGradientsOfTheFormWithoutIt) {
  const ferry::Device dev = ferry::Device::cpu();
  nn::Linear layer(3, 2, dev, {.seed = 5});
  const std::vector<float> xs{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
  const F32 x = ferry::to_device(dev, xs, Shape{2, 3});
  auto loss_fn = [&](const F32& a) {
    const F32 y = layer(a);
    return ferry::mean(y * y);
  };
  auto with_aux = [&](const F32& a) {
    F32 y = layer(a);
    return std::pair{ferry::mean(y * y), y};
  };
  auto [loss, grads] = nn::value_and_grad(layer, loss_fn)(x);
  auto [loss2, logits, grads2] = nn::value_and_grad(layer, with_aux, ferry::has_aux)(x);
  static_assert(std::is_same_v<decltype(grads2), nn::NamedParameters>);
  const auto host_of = [](const F32& a) {
    const auto h = a.to_host();
    return std::vector<float>(h.data().begin(), h.data().end());
  };
  EXPECT_EQ(host_of(loss2), host_of(loss));
  const std::vector<float> y = host_of(logits);
  EXPECT_EQ(y, host_of(layer(x)));
  ASSERT_EQ(grads2.size(), 2u);
  ASSERT_EQ(grads.size(), 2u);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(grads2[i].first, grads[i].first);
    EXPECT_EQ(host_of(grads2[i].second), host_of(grads[i].second)) << grads[i].first;
  }
  // By hand: mean over 4 elements of y^2 gives dy = y / 2; dW = dy^T x, db = column sums of dy.
  const std::vector<float> gw = host_of(grads2[0].second);
  const std::vector<float> gb = host_of(grads2[1].second);
  for (std::size_t o = 0; o < 2; ++o) {
    EXPECT_NEAR(gb[o], (y[o] + y[2 + o]) / 2, 1e-6);
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_NEAR(gw[o * 3 + k], (y[o] * xs[k] + y[2 + o] * xs[3 + k]) / 2, 1e-6) << o << ", " << k;
    }
  }
  expect_error<ferry::InvalidArgument>(
      [&] {
        return nn::value_and_grad(layer, [&](const F32& a) { return std::pair{layer(a), 0}; },
                                  ferry::has_aux)(x);
      },
      "[nn::value_and_grad] the function returned an array of shape (2, 2): its value must be "
      "a scalar (rank 0); use vjp for other outputs");
}

// ---- vjp of several outputs ----

TEST_P(Transforms, VjpOfATupleOfOutputsSumsTheProductsOfEach) {
  const std::vector<double> xv{0.5, -1, 2};
  const std::vector<double> wv{2, 3, -1};
  const std::vector<double> c1v{1, 2, 3};
  const std::vector<double> c2v{0.5, -1, 0.25};
  const D x = vec(dev, xv);
  const D w = vec(dev, wv);
  const D c1 = vec(dev, c1v);
  const D c2 = vec(dev, c2v);
  auto f = [](const D& a, const D& b) { return std::tuple{a * b, ferry::exp(a)}; };
  auto [ys, dx, dw] = ferry::vjp(f, x, w, std::tuple{c1, c2});
  static_assert(std::is_same_v<decltype(ys), std::tuple<D, D>>);
  const auto& [y1, y2] = ys;
  std::vector<double> want_y1, want_y2, want_dx, want_dw;
  for (std::size_t i = 0; i < 3; ++i) {
    want_y1.push_back(xv[i] * wv[i]);
    want_y2.push_back(std::exp(xv[i]));
    want_dx.push_back(c1v[i] * wv[i] + c2v[i] * std::exp(xv[i]));
    want_dw.push_back(c1v[i] * xv[i]);
  }
  EXPECT_EQ(host(y1), want_y1);
  expect_near(host(y2), want_y2);
  expect_near(host(dx), want_dx);
  EXPECT_EQ(host(dw), want_dw);
  // The sum of the vjps of each output alone.
  auto [ya, dxa, dwa] = ferry::vjp([](const D& a, const D& b) { return a * b; }, x, w, c1);
  auto [yb, dxb, dwb] = ferry::vjp([](const D& a, const D&) { return ferry::exp(a); }, x, w, c2);
  expect_near(host(dx), host(dxa + dxb));
  expect_near(host(dw), host(dwa + dwb));
}

TEST_P(Transforms, VjpOfOutputsThatAreOneArrayAnArgumentOrAConstant) {
  const D x = vec(dev, {1, -2});
  const D c1 = vec(dev, {1, 2});
  const D c2 = vec(dev, {3, 0.5});
  const D c3 = vec(dev, {-1, 4});
  // One array returned twice gets both cotangents; an argument returned as is passes its own.
  auto twice = [](const D& a) {
    const D y = a * a;
    return std::tuple{y, y, a};
  };
  auto [ys, dx] = ferry::vjp(twice, x, std::tuple{c1, c2, c3});
  EXPECT_EQ(host(std::get<0>(ys)), (std::vector<double>{1, 4}));
  EXPECT_EQ(host(dx), (std::vector<double>{(1 + 3) * 2 * 1 - 1, (2 + 0.5) * 2 * -2 + 4}));
  // An output that does not depend on the argument passes nothing back.
  const D w = vec(dev, {5, 6});
  auto [ys2, dx2] = ferry::vjp([&](const D& a) { return std::tuple{a * 2.0, w * 3.0}; }, x,
                               std::tuple{c1, c2});
  EXPECT_EQ(host(std::get<1>(ys2)), (std::vector<double>{15, 18}));
  EXPECT_EQ(host(dx2), (std::vector<double>{2, 4}));
  // Outputs of different element types, each with a cotangent of its own type.
  auto mixed = [](const D& a) { return std::tuple{a * a, ferry::sum(a).astype<float>()}; };
  const F32 c4 = ferry::to_device(dev, {2.0f}, Shape{});
  auto [ys3, dx3] = ferry::vjp(mixed, x, std::tuple{c1, c4});
  EXPECT_EQ(host(dx3), (std::vector<double>{1 * 2 * 1 + 2, 2 * 2 * -2 + 2}));
}

TEST_P(Transforms, VjpChecksEachCotangentOfATuple) {
  const D x = vec(dev, {1, 2, 3});
  auto f = [](const D& a) { return std::tuple{a * 2.0, ferry::sum(a)}; };
  expect_error<ferry::ShapeError>(
      [&] { return ferry::vjp(f, x, std::tuple{vec(dev, {1, 1, 1}), vec(dev, {1, 1})}); },
      "[vjp] cotangent 1 has shape (2), output 1 ()");
  expect_error<ferry::ShapeError>(
      [&] {
        return ferry::vjp(f, x,
                          std::tuple{vec(dev, {1, 1}), ferry::to_device(dev, {1.0}, Shape{})});
      },
      "[vjp] cotangent 0 has shape (2), output 0 (3)");
  // The form with one output says what it said before.
  expect_error<ferry::ShapeError>(
      [&] { return ferry::vjp([](const D& a) { return a * 2.0; }, x, vec(dev, {1, 1})); },
      "[vjp] the cotangent has shape (2), the function's value (3)");
  const ferry::Device other = ferry::Device::cpu();
  const std::string moved = message_of<ferry::DeviceMismatch>([&] {
    return ferry::vjp(f, x, std::tuple{ferry::to_device(other, {1.0, 1.0, 1.0}, Shape{3}),
                                      ferry::to_device(dev, {1.0}, Shape{})});
  });
  EXPECT_EQ(moved.rfind("[vjp] cotangent 0 lives on ", 0), 0u) << moved;
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::vjp(f, x, std::tuple{D{}, ferry::to_device(dev, {1.0}, Shape{})}); },
      "[vjp] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

// ---- std::vector arguments ----

/// sum over k of (k + 1) * sum(as[k]^2), whose gradient is 2 (k + 1) as[k].
D weighted_squares(const std::vector<D>& as) {
  D total = ferry::sum(as[0] * as[0]);
  for (std::size_t k = 1; k < as.size(); ++k) {
    total = total + ferry::sum(as[k] * as[k]) * static_cast<double>(k + 1);
  }
  return total;
}

TEST_P(Transforms, AVectorArgumentGetsAVectorOfGradients) {
  for (std::size_t n : {1u, 3u, 8u}) {
    SCOPED_TRACE(std::to_string(n) + " arrays");
    std::vector<D> xs;
    std::vector<std::vector<double>> values;
    double want_value = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const double a = static_cast<double>(k) + 1;
      const double b = -0.5 * static_cast<double>(k) - 0.25;
      values.push_back({a, b});
      xs.push_back(vec(dev, {a, b}));
      want_value += static_cast<double>(k + 1) * (a * a + b * b);
    }
    auto [v, gs] = ferry::value_and_grad(weighted_squares)(xs);
    static_assert(std::is_same_v<decltype(gs), std::vector<D>>);
    EXPECT_EQ(scalar(v), want_value);
    ASSERT_EQ(gs.size(), n);
    const std::vector<D> alone = ferry::grad(weighted_squares)(xs);
    const D ct = ferry::to_device(dev, {1.5}, Shape{});
    auto [y, products] = ferry::vjp(weighted_squares, xs, ct);
    EXPECT_EQ(scalar(y), want_value);
    ASSERT_EQ(alone.size(), n);
    ASSERT_EQ(products.size(), n);
    for (std::size_t k = 0; k < n; ++k) {
      const double s = 2 * static_cast<double>(k + 1);
      EXPECT_EQ(host(gs[k]), (std::vector<double>{s * values[k][0], s * values[k][1]})) << k;
      EXPECT_EQ(host(alone[k]), host(gs[k])) << k;
      EXPECT_EQ(host(products[k]),
                (std::vector<double>{1.5 * s * values[k][0], 1.5 * s * values[k][1]}))
          << k;
    }
  }
  // Of float arrays too.
  const std::vector<F32> fs{ferry::to_device(dev, {1.0f, 2.0f}, Shape{2}),
                            ferry::to_device(dev, {-3.0f}, Shape{1})};
  const std::vector<F32> gf = ferry::grad([](const std::vector<F32>& as) {
    return ferry::sum(as[0]) * ferry::sum(as[1]);
  })(fs);
  ASSERT_EQ(gf.size(), 2u);
  EXPECT_EQ(gf[0].to_host().data()[1], -3.0f);
  EXPECT_EQ(gf[1].to_host().data()[0], 3.0f);
}

TEST_P(Transforms, AnArrayTwiceInAVectorIsOneVariable) {
  const D a = vec(dev, {1, 2});
  const D b = vec(dev, {3, -1});
  // d/da sum(a b + a) = b + 1, which each position of a gets whole, as for repeated arguments.
  auto f = [](const std::vector<D>& as) { return ferry::sum(as[0] * as[1] + as[2]); };
  const std::vector<D> gs = ferry::grad(f)(std::vector<D>{a, b, a});
  ASSERT_EQ(gs.size(), 3u);
  EXPECT_EQ(host(gs[0]), (std::vector<double>{4, 0}));
  EXPECT_EQ(host(gs[1]), (std::vector<double>{1, 2}));
  EXPECT_EQ(host(gs[2]), (std::vector<double>{4, 0}));
  auto [gp, gq, gr] = ferry::grad([](const D& p, const D& q, const D& r) {
    return ferry::sum(p * q + r);
  })(a, b, a);
  EXPECT_EQ(host(gp), host(gs[0]));
  EXPECT_EQ(host(gr), host(gs[2]));
  // In a vector and as an argument: one variable as well.
  auto [gw, gws] = ferry::grad([](const D& p, const std::vector<D>& qs) {
    return ferry::sum(p * qs[0]);
  })(a, std::vector<D>{a});
  EXPECT_EQ(host(gw), (std::vector<double>{2, 4}));
  ASSERT_EQ(gws.size(), 1u);
  EXPECT_EQ(host(gws[0]), (std::vector<double>{2, 4}));
}

TEST_P(Transforms, VectorsMixWithPlainArgumentsAndConstants) {
  const D w = vec(dev, {1, 2});
  const std::vector<D> xs{vec(dev, {3, 4}), vec(dev, {-1, 0.5})};
  auto f = [](const D& p, const std::vector<D>& qs, int scale) {
    return ferry::sum(p * (qs[0] + qs[1])) * static_cast<double>(scale);
  };
  auto [v, gw, gxs] = ferry::value_and_grad(f)(w, xs, 2);
  EXPECT_EQ(scalar(v), 2 * (1 * 2 + 2 * 4.5));
  EXPECT_EQ(host(gw), (std::vector<double>{4, 9}));
  ASSERT_EQ(gxs.size(), 2u);
  EXPECT_EQ(host(gxs[0]), (std::vector<double>{2, 4}));
  EXPECT_EQ(host(gxs[1]), (std::vector<double>{2, 4}));
  // The vector first, and a vector of integer arrays: a constant, with no gradient.
  const std::vector<ferry::DeviceArray<std::int64_t>> ks{
      ferry::to_device(dev, std::vector<std::int64_t>{2, 3}, Shape{2})};
  auto g = [](const std::vector<D>& qs, const std::vector<ferry::DeviceArray<std::int64_t>>& is,
              const D& p) { return ferry::sum(qs[1] * p * is[0].astype<double>()); };
  auto [gqs, gp] = ferry::grad(g)(xs, ks, w);
  ASSERT_EQ(gqs.size(), 2u);
  EXPECT_EQ(host(gqs[0]), (std::vector<double>{0, 0}));  // as[0] is not used: zeros
  EXPECT_EQ(host(gqs[1]), (std::vector<double>{2, 6}));
  EXPECT_EQ(host(gp), (std::vector<double>{-2, 1.5}));
  // Positions pick plain arrays; a vector argument is a constant there, and not pickable.
  auto [v2, picked] = ferry::value_and_grad(f, {0})(w, xs, 2);
  ASSERT_EQ(picked.size(), 1u);
  EXPECT_EQ(host(picked[0]), (std::vector<double>{4, 9}));
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::value_and_grad(f, {1})(w, xs, 2); },
      "[value_and_grad] argument 1 is a std::vector of arrays, which positions do not pick: "
      "value_and_grad(f) without positions differentiates it");
  // has_aux with a vector.
  auto h = [](const std::vector<D>& qs) { return std::pair{ferry::sum(qs[0] * qs[1]), qs.size()}; };
  auto [v3, count, gh] = ferry::value_and_grad(h, ferry::has_aux)(xs);
  EXPECT_EQ(scalar(v3), -1.0);
  EXPECT_EQ(count, 2u);
  ASSERT_EQ(gh.size(), 2u);
  EXPECT_EQ(host(gh[0]), (std::vector<double>{-1, 0.5}));
  EXPECT_EQ(host(gh[1]), (std::vector<double>{3, 4}));
}

TEST_P(Transforms, AnEmptyVectorGetsAnEmptyVector) {
  const D w = vec(dev, {1, -2});
  auto f = [](const std::vector<D>& as, const D& p) {
    D total = ferry::sum(p * p);
    for (const D& a : as) total = total + ferry::sum(a);
    return total;
  };
  auto [v, gas, gw] = ferry::value_and_grad(f)(std::vector<D>{}, w);
  EXPECT_EQ(scalar(v), 5.0);
  EXPECT_TRUE(gas.empty());
  EXPECT_EQ(host(gw), (std::vector<double>{2, -4}));
  // The only argument: the value is a constant, and there is nothing to differentiate.
  const std::vector<D> none =
      ferry::grad([&](const std::vector<D>&) { return ferry::sum(w); })(std::vector<D>{});
  EXPECT_TRUE(none.empty());
  auto [y, products] =
      ferry::vjp([&](const std::vector<D>&) { return w * 2.0; }, std::vector<D>{}, w);
  EXPECT_EQ(host(y), (std::vector<double>{2, -4}));
  EXPECT_TRUE(products.empty());
}

TEST_P(Transforms, AnEmptyArrayInAVectorIsRefused) {
  const std::vector<D> xs{vec(dev, {1}), D{}};
  expect_error<ferry::InvalidArgument>(
      [&] { return ferry::value_and_grad(weighted_squares)(xs); },
      "[value_and_grad] got an empty DeviceArray (default-constructed, moved from or deallocated)");
}

TEST(TransformsManual, NothingWaits) {
  // On the stepped executor nothing runs until an export drives it, for each new form too.
  const ferry::Device manual = ferry_test::make_device(0);
  const D x = ferry::to_device(manual, {1.0, 2.0}, Shape{2});
  auto [loss, aux, g] = ferry::value_and_grad(
      [](const D& a) {
        return std::pair{ferry::sum(ferry::exp(a)), a * 2.0};
      },
      ferry::has_aux)(x);
  auto [ys, dx] = ferry::vjp([](const D& a) { return std::tuple{ferry::exp(a), a * a}; }, x,
                             std::tuple{x, x});
  const std::vector<D> gs = ferry::grad(weighted_squares)(std::vector<D>{x, x});
  EXPECT_FALSE(loss.ready());
  EXPECT_FALSE(aux.ready());
  EXPECT_FALSE(g.ready());
  EXPECT_FALSE(dx.ready());
  EXPECT_FALSE(gs[1].ready());
  expect_near(host(g), {std::exp(1.0), std::exp(2.0)});
  // The cotangents are constants, though equal to x: c exp(x) + 2 x c at c = x.
  expect_near(host(dx), {std::exp(1.0) + 2, std::exp(2.0) * 2 + 8});
  // x twice in the vector: one variable; sum(x^2) + 2 sum(x^2) gives 6x to each position.
  EXPECT_EQ(host(gs[1]), (std::vector<double>{6, 12}));
}

}  // namespace

}  // namespace test_transforms
