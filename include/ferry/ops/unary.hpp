#pragma once
// Unary elementwise ops. neg, abs and relu take any numeric array; the transcendental ones take
// floating-point arrays only (an integer array is a compile error: convert it with astype).

#include <cstddef>
#include <string>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/ops/binary.hpp"

namespace ferry::detail {

/// A unary elementwise op as a function object. `kFloating` ops need a floating element type.
template <class Op, bool kFloating>
struct UnaryOp {
  std::string_view name;

  template <Element T>
  DeviceArray<T> operator()(const DeviceArray<T>& a) const {
    if constexpr (kFloating) {
      static_assert(Floating<T>, "ferry: this op needs a floating-point element type (float, "
                                 "double, bfloat16); convert with astype<float>() first");
    } else {
      check_numeric<T>();
    }
    if constexpr (Numeric<T> && (!kFloating || Floating<T>)) {
      Step& s = step_of(name, a);
      Step* inputs[] = {&s};
      const auto count = static_cast<std::size_t>(s.shape().numel());
      const auto n = static_cast<double>(count);
      return launch<T>(s.device(), {StepKind::compute, std::string(name), {n, bytes_of(s), bytes_of(s)}},
                       s.shape(), inputs,
                       [count](const Step& st) { kernels::map(st.in<T>(0), st.out<T>(), count, Op{}); });
    } else {
      return {};
    }
  }
};

}  // namespace ferry::detail

namespace ferry {

/// -a elementwise (integers wrap). Throws InvalidArgument for an empty handle, as do all below.
template <Element T>
DeviceArray<T> neg(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Negate, false>{"neg"}(a);
}

/// |a| elementwise (integers wrap: abs of the minimum is the minimum).
template <Element T>
DeviceArray<T> abs(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Abs, false>{"abs"}(a);
}

/// max(a, 0) elementwise; NaN stays NaN.
template <Element T>
DeviceArray<T> relu(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Relu, false>{"relu"}(a);
}

/// e^a elementwise.
template <Element T>
DeviceArray<T> exp(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Exp, true>{"exp"}(a);
}

/// Natural logarithm elementwise (NaN below 0, -inf at 0).
template <Element T>
DeviceArray<T> log(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Log, true>{"log"}(a);
}

/// Square root elementwise (NaN below 0).
template <Element T>
DeviceArray<T> sqrt(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Sqrt, true>{"sqrt"}(a);
}

/// Logistic sigmoid 1 / (1 + e^-a) elementwise, stable for large |a|.
template <Element T>
DeviceArray<T> sigmoid(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Sigmoid, true>{"sigmoid"}(a);
}

/// Hyperbolic tangent elementwise.
template <Element T>
DeviceArray<T> tanh(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Tanh, true>{"tanh"}(a);
}

/// Exact GELU, a/2 * (1 + erf(a / sqrt 2)), elementwise.
template <Element T>
DeviceArray<T> gelu(const DeviceArray<T>& a) {
  return detail::UnaryOp<kernels::Gelu, true>{"gelu"}(a);
}

/// -a: the same as neg(a).
template <Element T>
DeviceArray<T> operator-(const DeviceArray<T>& a) {
  return neg(a);
}

}  // namespace ferry
