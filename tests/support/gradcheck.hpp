#pragma once
// Gradient checks against central finite differences in float64, and the random inputs and
// shapes they draw: shared by the gradient tests of every op.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ferry/ferry.hpp>

#include "support/arrays.hpp"

namespace ferry_test {

using D = ferry::DeviceArray<double>;
using ferry::Shape;

/// Host values of one input, and how to draw them.
struct Input {
  Shape shape;
  std::vector<double> values;
};

inline std::mt19937& rng() {
  static std::mt19937 gen(20261123);
  return gen;
}

/// Values in [lo, hi] at least `gap` from each other and from the kinks at 0 and +-1 (abs,
/// relu, max ties): finite differences straddle no kink.
inline Input draw(Shape shape, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  Input in{shape, {}};
  while (static_cast<std::int64_t>(in.values.size()) < shape.numel()) {
    const double v = u(rng());
    const bool near_kink = std::abs(v) < 0.05 || std::abs(std::abs(v) - 1) < 0.05;
    const bool near_other = std::any_of(in.values.begin(), in.values.end(),
                                        [&](double w) { return std::abs(v - w) < 1e-3; });
    if (!near_kink && !near_other) in.values.push_back(v);
  }
  return in;
}

inline D on(const ferry::Device& dev, const Input& in) {
  return ferry::to_device(dev, in.values, in.shape);
}

/// `a`'s elements (values_of, under the name the gradient tests read best).
inline std::vector<double> host(const D& a) { return values_of(a); }

inline double scalar(const D& a) { return host(a).at(0); }

/// Expects each gradient of `grads` (one per input) to match central differences of `f` within
/// a relative 1e-6 (relative to the larger of 1 and the derivative).
template <class F, std::size_t N>
void expect_matches_differences(const ferry::Device& dev, F f, std::array<Input, N> inputs,
                                const std::array<D, N>& grads) {
  const double h = 1e-5;
  auto eval = [&]() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return scalar(f(on(dev, inputs[I])...));
    }(std::make_index_sequence<N>{});
  };
  for (std::size_t k = 0; k < N; ++k) {
    SCOPED_TRACE("input " + std::to_string(k) + " of shape " + inputs[k].shape.to_string());
    ASSERT_EQ(grads[k].shape(), inputs[k].shape);
    const std::vector<double> analytic = host(grads[k]);
    for (std::size_t e = 0; e < inputs[k].values.size(); ++e) {
      const double x = inputs[k].values[e];
      inputs[k].values[e] = x + h;
      const double up = eval();
      inputs[k].values[e] = x - h;
      const double down = eval();
      inputs[k].values[e] = x;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[e], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
          << "element " << e;
    }
  }
}

/// value_and_grad of `f` at `inputs`, checked against finite differences (and the value
/// against f itself).
template <class F, class... In>
void check(const ferry::Device& dev, F f, const In&... inputs) {
  auto result = ferry::value_and_grad(f)(on(dev, inputs)...);
  EXPECT_DOUBLE_EQ(scalar(std::get<0>(result)), scalar(f(on(dev, inputs)...)));
  const std::array<D, sizeof...(In)> grads = std::apply(
      [](const auto&, const auto&... g) { return std::array<D, sizeof...(In)>{g...}; }, result);
  expect_matches_differences(dev, f, std::array<Input, sizeof...(In)>{inputs...}, grads);
}

/// A constant of `shape` to weigh an output by, so that no two elements get the same cotangent.
inline D weights(const ferry::Device& dev, const Shape& shape) {
  std::vector<double> w(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + 0.25 * static_cast<double>(i % 7);
  return ferry::to_device(dev, w, shape);
}

/// sum(y * weights): a scalar that depends on every element of y differently.
inline D weighed(const D& y) { return ferry::sum(y * weights(y.device(), y.shape())); }

/// A random shape of rank 0 to 3, sizes 0 to 3 (0 only where `empty` allows).
inline Shape random_shape(bool empty = false) {
  std::uniform_int_distribution<int> rank(0, 3);
  std::uniform_int_distribution<std::int64_t> size(empty ? 0 : 1, 3);
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank(rng())));
  for (auto& d : dims) d = size(rng());
  return Shape(std::span<const std::int64_t>(dims));
}

/// A shape that broadcasts with `s`: some trailing dimensions of it, some set to 1.
inline Shape broadcast_partner(const Shape& s) {
  std::uniform_int_distribution<std::size_t> keep(0, s.rank());
  std::bernoulli_distribution one(0.4);
  const std::size_t rank = keep(rng());
  std::vector<std::int64_t> dims;
  for (std::size_t i = s.rank() - rank; i < s.rank(); ++i) {
    dims.push_back(one(rng()) ? 1 : s.dims()[i]);
  }
  return Shape(std::span<const std::int64_t>(dims));
}

}  // namespace ferry_test
