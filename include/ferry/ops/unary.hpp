#pragma once
// Unary elementwise ops. neg, abs and relu take any numeric array; the transcendental ones take
// floating-point arrays only (an integer array is a compile error: convert it with astype).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"

namespace ferry::detail {

/// A unary elementwise op as a function object. `kFloating` ops need a floating element type;
/// `kMask` ops (isnan, logical_not) take any element type and return a bool mask, which has no
/// gradient and is not fused.
template <class Op, bool kFloating, bool kMask = false>
struct UnaryOp {
  std::string_view name;

  template <class T>
  using result_t = std::conditional_t<kMask, bool, T>;

  /// Takes `a` by forwarding reference: an array given away may have its buffer reused for
  /// the result, and its handle is left empty.
  template <AnyArray A>
  auto operator()(A&& a) const {
    using T = typename std::remove_cvref_t<A>::value_type;
    RecordScope scope;
    auto out = apply(std::as_const(a), kGiven<A> ? 1u : 0u);
    if (Recorder* rec = scope.recorder()) record_call(*rec, std::as_const(a), out);
    if (Tape* tape = scope.tape()) {
      Step* in[] = {ArrayAccess::step(a)};
      if constexpr (kMask) {
        record_no_grad(*tape, in, *ArrayAccess::step(out));
      } else {
        record_grad<T>(*tape, in, *ArrayAccess::step(out),
                       [](auto t, GradCall& c) { unary_backward<Op>(t, c); });
      }
    }
    consume(std::forward<A>(a));
    return out;
  }

  template <Element T>
  void record_call(Recorder& rec, const DeviceArray<T>& a,
                   const DeviceArray<result_t<T>>& out) const {
    Step& s = *ArrayAccess::step(a);
    OpCall call{
        name, {&s}, {}, [op = *this](std::span<Step* const> in, std::span<const std::int64_t>) {
          return handle_of(op.apply(as_array<T>(in[0]), 0));
        }};
    if constexpr (!kMask) call.elementwise = {&fused_map<T, Op>, &launch_fused<T>, dtype_of<T>, {}};
    record(rec, std::move(call), out, rec.shape_of(s));
  }

  // Defined below the class, not in it: a member defined in its class is inline, and g++
  // instantiates it in every unit that uses it despite instantiations.hpp's `extern
  // template` (the separate mode compiles it once).
  template <Element T>
  DeviceArray<result_t<T>> apply(const DeviceArray<T>& a, std::uint32_t given) const;
};

template <class Op, bool kFloating, bool kMask>
template <Element T>
auto UnaryOp<Op, kFloating, kMask>::apply(const DeviceArray<T>& a, std::uint32_t given) const
    -> DeviceArray<result_t<T>> {
  using R = result_t<T>;
  if constexpr (kFloating) {
    static_assert(Floating<T>, "ferry: this op needs a floating-point element type (float, "
                               "double, bfloat16, float16); convert with astype<float>() first");
  } else if constexpr (!kMask) {
    check_numeric<T>();
  }
  if constexpr (kMask || (Numeric<T> && (!kFloating || Floating<T>))) {
    Step& s = step_of(name, a);
    Step* inputs[] = {&s};
    const auto n = static_cast<double>(s.shape().numel());
    // Row-major bytes: launch charges a tiled output's padding, as the input's layout has it.
    const double written = n * static_cast<double>(sizeof(R));
    return launch<R>(
        s.device(), {StepKind::compute, name, {n, bytes_of(s), written}},
        s.shape(), inputs,
        [](const Step& st) {
          for_each_element_run(st, sizeof(T) + sizeof(R), [&](std::size_t at, std::size_t count) {
            kernels::map(st.in<T>(0) + at, st.out<R>() + at, count, Op{});
          });
        },
        LayoutRule::elementwise, std::is_same_v<R, T> ? given : 0u);
  } else {
    return {};
  }
}

}  // namespace ferry::detail

namespace ferry {

/// -a elementwise (integers wrap). Throws InvalidArgument for an empty handle, as do all below.
/// Each takes its array by forwarding reference: given away (`std::move(a)`, a temporary), its
/// buffer may be reused for the result (a donation) and the handle is left empty.
template <detail::AnyArray A>
auto neg(A&& a) {
  return detail::UnaryOp<kernels::Negate, false>{"neg"}(std::forward<A>(a));
}

/// |a| elementwise (integers wrap: abs of the minimum is the minimum).
template <detail::AnyArray A>
auto abs(A&& a) {
  return detail::UnaryOp<kernels::Abs, false>{"abs"}(std::forward<A>(a));
}

/// max(a, 0) elementwise; NaN stays NaN.
template <detail::AnyArray A>
auto relu(A&& a) {
  return detail::UnaryOp<kernels::Relu, false>{"relu"}(std::forward<A>(a));
}

/// e^a elementwise.
template <detail::AnyArray A>
auto exp(A&& a) {
  return detail::UnaryOp<kernels::Exp, true>{"exp"}(std::forward<A>(a));
}

/// Natural logarithm elementwise (NaN below 0, -inf at 0).
template <detail::AnyArray A>
auto log(A&& a) {
  return detail::UnaryOp<kernels::Log, true>{"log"}(std::forward<A>(a));
}

/// Square root elementwise (NaN below 0).
template <detail::AnyArray A>
auto sqrt(A&& a) {
  return detail::UnaryOp<kernels::Sqrt, true>{"sqrt"}(std::forward<A>(a));
}

/// Logistic sigmoid 1 / (1 + e^-a) elementwise, stable for large |a|.
template <detail::AnyArray A>
auto sigmoid(A&& a) {
  return detail::UnaryOp<kernels::Sigmoid, true>{"sigmoid"}(std::forward<A>(a));
}

/// Hyperbolic tangent elementwise.
template <detail::AnyArray A>
auto tanh(A&& a) {
  return detail::UnaryOp<kernels::Tanh, true>{"tanh"}(std::forward<A>(a));
}

/// Exact GELU, a/2 * (1 + erf(a / sqrt 2)), elementwise.
template <detail::AnyArray A>
auto gelu(A&& a) {
  return detail::UnaryOp<kernels::Gelu, true>{"gelu"}(std::forward<A>(a));
}

/// sin a elementwise (radians).
template <detail::AnyArray A>
auto sin(A&& a) {
  return detail::UnaryOp<kernels::Sin, true>{"sin"}(std::forward<A>(a));
}

/// cos a elementwise (radians).
template <detail::AnyArray A>
auto cos(A&& a) {
  return detail::UnaryOp<kernels::Cos, true>{"cos"}(std::forward<A>(a));
}

/// The error function elementwise.
template <detail::AnyArray A>
auto erf(A&& a) {
  return detail::UnaryOp<kernels::Erf, true>{"erf"}(std::forward<A>(a));
}

/// The largest integer not above a, elementwise; floating types only (NumPy also takes
/// integers). Its gradient is 0 everywhere, as JAX's.
template <detail::AnyArray A>
auto floor(A&& a) {
  return detail::UnaryOp<kernels::Floor, true>{"floor"}(std::forward<A>(a));
}

/// The smallest integer not below a, elementwise; like floor.
template <detail::AnyArray A>
auto ceil(A&& a) {
  return detail::UnaryOp<kernels::Ceil, true>{"ceil"}(std::forward<A>(a));
}

/// The nearest integer, halves to even (round(2.5) is 2, as NumPy and PyTorch; C's round
/// would give 3); like floor.
template <detail::AnyArray A>
auto round(A&& a) {
  return detail::UnaryOp<kernels::Round, true>{"round"}(std::forward<A>(a));
}

/// -1, 0 or 1 by the sign of a (0 for -0, NaN for NaN); any numeric type. Gradient 0.
template <detail::AnyArray A>
auto sign(A&& a) {
  return detail::UnaryOp<kernels::Sign, false>{"sign"}(std::forward<A>(a));
}

/// a * a elementwise; any numeric type (integers wrap).
template <detail::AnyArray A>
auto square(A&& a) {
  return detail::UnaryOp<kernels::Square, false>{"square"}(std::forward<A>(a));
}

/// log(1 + a), accurate for |a| much below 1.
template <detail::AnyArray A>
auto log1p(A&& a) {
  return detail::UnaryOp<kernels::Log1p, true>{"log1p"}(std::forward<A>(a));
}

/// e^a - 1, accurate for |a| much below 1.
template <detail::AnyArray A>
auto expm1(A&& a) {
  return detail::UnaryOp<kernels::Expm1, true>{"expm1"}(std::forward<A>(a));
}

/// 1 / sqrt(a) elementwise (inf at 0, NaN below 0).
template <detail::AnyArray A>
auto rsqrt(A&& a) {
  return detail::UnaryOp<kernels::Rsqrt, true>{"rsqrt"}(std::forward<A>(a));
}

/// a * sigmoid(a) (SiLU, swish) elementwise.
template <detail::AnyArray A>
auto silu(A&& a) {
  return detail::UnaryOp<kernels::Silu, true>{"silu"}(std::forward<A>(a));
}

/// log(1 + e^a) elementwise, without overflow for large a (PyTorch's softplus with beta 1 and
/// no threshold: exact everywhere).
template <detail::AnyArray A>
auto softplus(A&& a) {
  return detail::UnaryOp<kernels::Softplus, true>{"softplus"}(std::forward<A>(a));
}

/// Where a is NaN, as a bool mask; any element type (false for integers and bool).
template <detail::AnyArray A>
auto isnan(A&& a) {
  return detail::UnaryOp<kernels::IsNan, false, true>{"isnan"}(std::forward<A>(a));
}

/// Where a is neither infinite nor NaN, as a bool mask; any element type.
template <detail::AnyArray A>
auto isfinite(A&& a) {
  return detail::UnaryOp<kernels::IsFinite, false, true>{"isfinite"}(std::forward<A>(a));
}

/// Where a is false (zero), as a bool mask; any element type, as NumPy.
template <detail::AnyArray A>
auto logical_not(A&& a) {
  return detail::UnaryOp<kernels::LogicalNot, false, true>{"logical_not"}(std::forward<A>(a));
}

/// -a: the same as neg(a).
template <detail::AnyArray A>
auto operator-(A&& a) {
  return neg(std::forward<A>(a));
}

}  // namespace ferry
