#pragma once
// What the backward rules share: typed views of a GradCall, reducing a broadcast cotangent back
// to its operand's shape, and the standard normal density and distribution GELU's rule needs.

#include <array>
#include <cstddef>
#include <numbers>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry::detail {

/// Forward input `i` of the op, as an array.
template <Element T>
DeviceArray<T> input_of(const GradCall& c, std::size_t i) {
  return as_array<T>(c.inputs[i]);
}

/// The op's forward output, as an array.
template <Element T>
DeviceArray<T> output_of(const GradCall& c) {
  return as_array<T>(&c.output);
}

/// The cotangent of the op's output.
template <Element T>
DeviceArray<T> cotangent_of(const GradCall& c) {
  return ArrayAccess::wrap<T>(Handle(c.cotangent));
}

/// a + b for two cotangents of element type T.
template <Floating T>
Handle add_cotangents_as(Handle a, Handle b) {
  return handle_of(ArrayAccess::wrap<T>(std::move(a)) + ArrayAccess::wrap<T>(std::move(b)));
}

/// Gives input `i` the cotangent `g`: every cotangent a rule makes comes through here, so the
/// backward pass learns how to sum cotangents of T from the code that made one.
template <Floating T>
void set_grad(GradCall& c, std::size_t i, DeviceArray<T> g) {
  cotangent_sum(dtype_of<T>).store(&add_cotangents_as<T>, std::memory_order_relaxed);
  c.grads[i] = handle_of(std::move(g));
}

/// `g` (of a shape `target` broadcasts to) summed over the dimensions `target` was broadcast
/// along, or averaged with `average`, then given the shape `user_target` (the shape the
/// function sees: symbolic in a program trace, whose guards already pinned which sizes are 1).
template <Floating T>
DeviceArray<T> reduce_to(const DeviceArray<T>& g, const Shape& target, const Shape& user_target,
                         bool average = false) {
  const Shape& from = ArrayAccess::step(g)->shape();
  const std::size_t lead = from.rank() - target.rank();
  std::vector<int> axes;
  for (std::size_t i = 0; i < from.rank(); ++i) {
    if (i < lead || (target.dims()[i - lead] == 1 && from.dims()[i] != 1)) {
      axes.push_back(static_cast<int>(i));
    }
  }
  const DeviceArray<T> r = axes.empty() ? g : average ? mean(g, axes, true) : sum(g, axes, true);
  return reshape(r, user_target);
}

/// reduce_to the shape of step `target`.
template <Floating T>
DeviceArray<T> reduce_to(const DeviceArray<T>& g, const Step& target, bool average = false) {
  return reduce_to(g, target.shape(), user_shape(target), average);
}

/// The shape `s` has after reducing the dimensions `flags` marks with keepdims: each is 1.
inline Shape kept_shape(const Shape& s, const std::array<bool, kMaxRank>& flags) {
  std::array<SymInt, kMaxRank> dims{};
  for (std::size_t d = 0; d < s.rank(); ++d) dims[d] = flags[d] ? SymInt(1) : s[d];
  return Shape(std::span<const SymInt>(dims.data(), s.rank()));
}

/// Phi(x), the standard normal distribution function, elementwise (an op of its own, so that
/// GELU's gradient is differentiable again).
template <AnyArray A>
auto normal_cdf(A&& a) {
  return UnaryOp<kernels::NormalCdf, true>{"normal_cdf"}(std::forward<A>(a));
}

/// Zeros of step `s`'s shape (symbolic in a trace) on its device.
template <Floating T>
DeviceArray<T> zeros_like_step(const Step& s) {
  return zeros<T>(DeviceAccess::wrap(s.device()), user_shape(s));
}

/// phi(x) = e^(-x^2 / 2) / sqrt(2 pi), the standard normal density, elementwise.
template <Floating T>
DeviceArray<T> normal_pdf(const DeviceArray<T>& x) {
  return exp(x * x * -0.5) * (std::numbers::inv_sqrtpi / std::numbers::sqrt2);
}

}  // namespace ferry::detail
