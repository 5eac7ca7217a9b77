#pragma once
// The backward rules of the elementwise ops: unary, binary (an array operand broadcast in the
// forward pass gets its cotangent summed back to its shape), with a scalar, where, astype and
// broadcast_to. Ties of maximum and minimum split the cotangent in half, as JAX does.

#include <cmath>
#include <numbers>
#include <type_traits>

#include "ferry/autodiff/support.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/broadcast.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry::detail {

template <class Op, Floating T>
void unary_backward(Tag<T>, GradCall& c) {
  const DeviceArray<T> x = input_of<T>(c, 0);
  const DeviceArray<T> y = output_of<T>(c);
  const DeviceArray<T> g = cotangent_of<T>(c);
  if constexpr (std::is_same_v<Op, kernels::Negate>) {
    set_grad(c, 0, -g);
  } else if constexpr (std::is_same_v<Op, kernels::Abs>) {  // sign(x), 0 at 0
    set_grad(c, 0, where(greater(x, T(0)), g, where(less(x, T(0)), -g, T(0))));
  } else if constexpr (std::is_same_v<Op, kernels::Relu>) {  // 0 at 0, as JAX and PyTorch
    set_grad(c, 0, where(greater(x, T(0)), g, T(0)));
  } else if constexpr (std::is_same_v<Op, kernels::Exp>) {
    set_grad(c, 0, g * y);
  } else if constexpr (std::is_same_v<Op, kernels::Log>) {
    set_grad(c, 0, g / x);
  } else if constexpr (std::is_same_v<Op, kernels::Sqrt>) {
    set_grad(c, 0, g / (y * 2));
  } else if constexpr (std::is_same_v<Op, kernels::Sigmoid>) {
    set_grad(c, 0, g * (y * (1 - y)));
  } else if constexpr (std::is_same_v<Op, kernels::Tanh>) {
    set_grad(c, 0, g * (1 - y * y));
  } else if constexpr (std::is_same_v<Op, kernels::Gelu>) {
    set_grad(c, 0, g * (normal_cdf(x) + x * normal_pdf(x)));
  } else if constexpr (std::is_same_v<Op, kernels::NormalCdf>) {
    set_grad(c, 0, g * normal_pdf(x));
  } else if constexpr (std::is_same_v<Op, kernels::Sin>) {
    set_grad(c, 0, g * cos(x));
  } else if constexpr (std::is_same_v<Op, kernels::Cos>) {
    set_grad(c, 0, -(g * sin(x)));
  } else if constexpr (std::is_same_v<Op, kernels::Erf>) {  // 2 / sqrt(pi) e^(-x^2)
    set_grad(c, 0, g * (exp(-square(x)) * (2 * std::numbers::inv_sqrtpi)));
  } else if constexpr (std::is_same_v<Op, kernels::Floor> || std::is_same_v<Op, kernels::Ceil> ||
                       std::is_same_v<Op, kernels::Round> || std::is_same_v<Op, kernels::Sign>) {
    set_grad(c, 0, zeros_like_step<T>(*c.inputs[0]));  // piecewise constant, as JAX
  } else if constexpr (std::is_same_v<Op, kernels::Square>) {
    set_grad(c, 0, g * (x * 2));
  } else if constexpr (std::is_same_v<Op, kernels::Log1p>) {
    set_grad(c, 0, g / (x + 1));
  } else if constexpr (std::is_same_v<Op, kernels::Expm1>) {
    set_grad(c, 0, g * (y + 1));
  } else if constexpr (std::is_same_v<Op, kernels::Rsqrt>) {  // -y^3 / 2
    set_grad(c, 0, g * (y * y * y * -0.5));
  } else if constexpr (std::is_same_v<Op, kernels::Silu>) {  // s (1 + x (1 - s))
    const DeviceArray<T> s = sigmoid(x);
    set_grad(c, 0, g * (s * (x * (1 - s) + 1)));
  } else if constexpr (std::is_same_v<Op, kernels::Softplus>) {
    set_grad(c, 0, g * sigmoid(x));
  } else {
    static_assert(!sizeof(Op), "ferry: this unary op has no backward rule");
  }
}

template <class Op, Floating T>
void binary_backward(Tag<T>, GradCall& c) {
  const DeviceArray<T> a = input_of<T>(c, 0);
  const DeviceArray<T> b = input_of<T>(c, 1);
  const DeviceArray<T> y = output_of<T>(c);
  const DeviceArray<T> g = cotangent_of<T>(c);
  // An operand that reaches no variable (data, a constant) gets no cotangent: its kernels would
  // run for nothing. The other's is computed by the same ops, in the same order.
  const bool need_a = c.needs(0);
  const bool need_b = c.needs(1);
  DeviceArray<T> ga;
  DeviceArray<T> gb;
  if constexpr (std::is_same_v<Op, kernels::Add>) {
    ga = g;
    gb = g;
  } else if constexpr (std::is_same_v<Op, kernels::Subtract>) {
    ga = g;
    if (need_b) gb = -g;
  } else if constexpr (std::is_same_v<Op, kernels::Multiply>) {
    if (need_a) ga = g * b;
    if (need_b) gb = g * a;
  } else if constexpr (std::is_same_v<Op, kernels::Divide>) {
    if (need_a) ga = g / b;
    if (need_b) gb = -(g * y / b);
  } else if constexpr (std::is_same_v<Op, kernels::Maximum> ||
                       std::is_same_v<Op, kernels::Minimum>) {
    constexpr bool kMax = std::is_same_v<Op, kernels::Maximum>;
    DeviceArray<bool> a_wins;
    DeviceArray<bool> b_wins;
    if (need_a) a_wins = kMax ? greater(a, b) : less(a, b);
    if (need_b) b_wins = kMax ? less(a, b) : greater(a, b);
    const DeviceArray<T> tie = where(equal(a, b), g * 0.5, T(0));
    if (need_a) ga = where(a_wins, g, tie);
    if (need_b) gb = where(b_wins, g, tie);
  } else if constexpr (std::is_same_v<Op, kernels::Pow>) {
    // b a^(b-1), 0 where b is 0 (not 0 * inf at a = 0); a^b log a, with log 1 where a is 0.
    if (need_a) ga = g * where(equal(b, T(0)), T(0), b * pow(a, b - 1));
    if (need_b) gb = g * (y * log(where(equal(a, T(0)), T(1), a)));
  } else {
    static_assert(!sizeof(Op), "ferry: this binary op has no backward rule");
  }
  if (need_a) set_grad(c, 0, reduce_to(ga, *c.inputs[0]));
  if (need_b) set_grad(c, 1, reduce_to(gb, *c.inputs[1]));
}

template <class Op, Floating T>
void scalar_backward(Tag<T>, GradCall& c, T value, bool value_first) {
  const DeviceArray<T> a = input_of<T>(c, 0);
  const DeviceArray<T> y = output_of<T>(c);
  const DeviceArray<T> g = cotangent_of<T>(c);
  const auto v = static_cast<kernels::compute_t<T>>(value);
  if constexpr (std::is_same_v<Op, kernels::Add>) {
    set_grad(c, 0, g);
  } else if constexpr (std::is_same_v<Op, kernels::Subtract>) {
    set_grad(c, 0, value_first ? -g : g);
  } else if constexpr (std::is_same_v<Op, kernels::Multiply>) {
    set_grad(c, 0, g * v);
  } else if constexpr (std::is_same_v<Op, kernels::Divide>) {
    set_grad(c, 0, value_first ? -(g * y / a) : g / v);
  } else if constexpr (std::is_same_v<Op, kernels::Maximum> ||
                       std::is_same_v<Op, kernels::Minimum>) {
    constexpr bool kMax = std::is_same_v<Op, kernels::Maximum>;
    const DeviceArray<bool> wins = kMax ? greater(a, v) : less(a, v);
    set_grad(c, 0, where(wins, g, where(equal(a, v), g * 0.5, T(0))));
  } else if constexpr (std::is_same_v<Op, kernels::Pow>) {
    if (value_first) {  // v^a: v^a log v, with log 1 for v = 0
      set_grad(c, 0, g * (y * std::log(v == 0 ? 1 : v)));
    } else if (v == 0) {  // a^0 is 1 everywhere
      set_grad(c, 0, g * 0);
    } else {
      set_grad(c, 0, g * (pow(a, v - 1) * v));
    }
  } else {
    static_assert(!sizeof(Op), "ferry: this binary op has no backward rule");
  }
}

/// The rule of an op with a SymFloat scalar: the value stays a SymFloat, so that inside a
/// traced program the gradient's ops read each call's value as the op did. Pow's rule needs
/// log v and the value of v - 1 in T: it reads the value, which guards it in a trace.
template <class Op, Floating T>
void sym_scalar_backward(Tag<T> tag, GradCall& c, const SymFloat& value, bool value_first) {
  if constexpr (std::is_same_v<Op, kernels::Pow>) {
    scalar_backward<Op>(tag, c, kernels::convert_value<T>(static_cast<double>(value)), value_first);
  } else {
    const DeviceArray<T> a = input_of<T>(c, 0);
    const DeviceArray<T> g = cotangent_of<T>(c);
    if constexpr (std::is_same_v<Op, kernels::Add>) {
      set_grad(c, 0, g);
    } else if constexpr (std::is_same_v<Op, kernels::Subtract>) {
      set_grad(c, 0, value_first ? -g : g);
    } else if constexpr (std::is_same_v<Op, kernels::Multiply>) {
      set_grad(c, 0, g * value);
    } else if constexpr (std::is_same_v<Op, kernels::Divide>) {
      set_grad(c, 0, value_first ? -(g * output_of<T>(c) / a) : g / value);
    } else if constexpr (std::is_same_v<Op, kernels::Maximum> ||
                         std::is_same_v<Op, kernels::Minimum>) {
      constexpr bool kMax = std::is_same_v<Op, kernels::Maximum>;
      const DeviceArray<bool> wins = kMax ? greater(a, value) : less(a, value);
      set_grad(c, 0, where(wins, g, where(equal(a, value), g * 0.5, T(0))));
    } else {
      static_assert(!sizeof(Op), "ferry: this binary op has no backward rule");
    }
  }
}

template <Floating T>
void select_backward(Tag<T>, GradCall& c, bool a_array, bool b_array) {
  const DeviceArray<bool> mask = input_of<bool>(c, 0);
  const DeviceArray<T> g = cotangent_of<T>(c);
  std::size_t next = 1;
  if (a_array) {
    if (c.needs(next)) set_grad(c, next, reduce_to(where(mask, g, T(0)), *c.inputs[next]));
    ++next;
  }
  if (b_array && c.needs(next)) {
    set_grad(c, next, reduce_to(where(mask, T(0), g), *c.inputs[next]));
  }
}

template <Element From, Floating To>
void astype_backward(Tag<To>, GradCall& c) {
  // An integer or bool input (a mask from a comparison, an index from argmax, a cast to an
  // integer) is a constant of the gradient, as in JAX and PyTorch: its slot stays empty, and
  // the path through it contributes zero.
  if constexpr (Floating<From>) set_grad(c, 0, cotangent_of<To>(c).template astype<From>());
}

template <Floating T>
void broadcast_backward(Tag<T>, GradCall& c, bool average) {
  set_grad(c, 0, reduce_to(cotangent_of<T>(c), *c.inputs[0], average));
}

}  // namespace ferry::detail
