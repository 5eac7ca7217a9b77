#pragma once
// Unary elementwise ops. neg, abs and relu take any numeric array; the transcendental ones take
// floating-point arrays only (an integer array is a compile error: convert it with astype).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"

namespace ferry::detail {

/// A unary elementwise op as a function object. `kFloating` ops need a floating element type.
template <class Op, bool kFloating>
struct UnaryOp {
  std::string_view name;

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
      record_grad<T>(*tape, in, *ArrayAccess::step(out),
                     [](auto t, GradCall& c) { unary_backward<Op>(t, c); });
    }
    consume(std::forward<A>(a));
    return out;
  }

  template <Element T>
  void record_call(Recorder& rec, const DeviceArray<T>& a, const DeviceArray<T>& out) const {
    Step& s = *ArrayAccess::step(a);
    OpCall call{name, {&s}, {}, [op = *this](std::span<Step* const> in, std::span<const std::int64_t>) {
                  return handle_of(op.apply(as_array<T>(in[0]), 0));
                }};
    call.elementwise = {&fused_map<T, Op>, &launch_fused<T>, dtype_of<T>, {}};
    record(rec, std::move(call), out, rec.shape_of(s));
  }

  template <Element T>
  DeviceArray<T> apply(const DeviceArray<T>& a, std::uint32_t given) const {
    if constexpr (kFloating) {
      static_assert(Floating<T>, "ferry: this op needs a floating-point element type (float, "
                                 "double, bfloat16); convert with astype<float>() first");
    } else {
      check_numeric<T>();
    }
    if constexpr (Numeric<T> && (!kFloating || Floating<T>)) {
      Step& s = step_of(name, a);
      Step* inputs[] = {&s};
      const auto n = static_cast<double>(s.shape().numel());
      return launch<T>(
          s.device(), {StepKind::compute, std::string(name), {n, bytes_of(s), bytes_of(s)}},
          s.shape(), inputs,
          [](const Step& st) {
            for_each_element_run(st, 2 * sizeof(T), [&](std::size_t at, std::size_t count) {
              kernels::map(st.in<T>(0) + at, st.out<T>() + at, count, Op{});
            });
          },
          LayoutRule::elementwise, given);
    } else {
      return {};
    }
  }
};

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

/// -a: the same as neg(a).
template <detail::AnyArray A>
auto operator-(A&& a) {
  return neg(std::forward<A>(a));
}

}  // namespace ferry
