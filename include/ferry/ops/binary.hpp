#pragma once
// The machinery shared by every binary elementwise op: device and element-type checks,
// broadcasting, cost, and the three call forms (array-array, array-scalar, scalar-array). A
// scalar may be a SymFloat: in a traced program it is then an input of the trace, which each
// replay reads afresh (the op records it as a parameter, and a fused kernel gets its value).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/kernels/layout.hpp"
#include "ferry/ops/fused.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry::detail {

template <class T>
constexpr void check_numeric() {
  static_assert(Numeric<T>, "ferry: arithmetic needs a numeric element type, not bool; "
                            "convert the mask with astype<T>() first");
}

/// A scalar that may be symbolic in a trace, given with a floating array: a SymFloat, or a
/// SymInt (an integer the op reads as a SymFloat, so a size may scale an array).
template <class S, class T>
concept SymScalarFor = Floating<T> && !ScalarFor<S, T> &&
                       (std::same_as<std::remove_cvref_t<S>, SymFloat> ||
                        std::same_as<std::remove_cvref_t<S>, SymInt>);

/// A floating C++ scalar (or a SymFloat) given with an integer array (`int_array * 0.5`), which
/// ScalarFor refuses: BinaryOp accepts the call only to say why, instead of "no match for
/// operator*".
template <class S, class T>
concept FloatingScalarForIntegers =
    Numeric<T> && !Floating<T> &&
    (std::is_floating_point_v<std::remove_cvref_t<S>> || HalfFloating<std::remove_cvref_t<S>> ||
     std::same_as<std::remove_cvref_t<S>, SymFloat>);

template <class S, class T>
constexpr void check_scalar_for() {
  static_assert(ScalarFor<S, T>,
                "ferry: a floating scalar needs a floating array; convert the array with "
                "astype<float>() first, or give an integer scalar");
}

inline double bytes_of(const Step& s) { return static_cast<double>(s.output_bytes()); }

/// Runs `f(offset, count)` over the elements step `s`'s output really holds, split over the
/// step's runner in chunks of about kernels::kChunkBytes (`bytes_per_element` counts every
/// operand): the kernel of an elementwise op whose operands share its shape and order (see
/// LayoutRule::elementwise). Throws what `f` throws.
template <class F>
void for_each_element_run(const Step& s, std::size_t bytes_per_element, F&& f) {
  kernels::parallel_valid_runs(s.runner(), s.shape(), s.layout().order,
                               kernels::chunk_elements(bytes_per_element), f);
}

/// `op` applied elementwise to a and b, broadcast; results of type R. `given` marks the
/// operands the caller gave away (bit 0: a, bit 1: b), which the output may overwrite. `name`
/// has static storage (a BinaryOp's literal): the steps keep it without a copy.
template <class R, Element T, class Op>
DeviceArray<R> zip_arrays(std::string_view name, const DeviceArray<T>& a, const DeviceArray<T>& b,
                          Op op, std::uint32_t given) {
  Step& sa = step_of(name, a);
  Step& sb = step_of(name, b);
  Step* inputs[] = {&sa, &sb};
  const std::shared_ptr<DeviceState>& dev = common_device(name, inputs);
  const bool same = sa.shape() == sb.shape();
  const Shape out = same ? sa.shape() : broadcast_shapes(name, sa.shape(), sb.shape());
  const auto n = static_cast<double>(out.numel());
  // Built in launch's parameter (a moved StepInfo costs some 40 instructions a step).
  const auto info = [&] {
    return StepInfo{StepKind::compute, StepName::of_static(name),
                    {n, bytes_of(sa) + bytes_of(sb), n * static_cast<double>(sizeof(R))}};
  };
  if (same) {
    return launch<R>(
        dev, info(), out, inputs,
        [op](const Step& s) {
          for_each_element_run(
              s, 2 * sizeof(T) + sizeof(R), [&](std::size_t at, std::size_t count) {
                kernels::zip(s.in<T>(0) + at, s.in<T>(1) + at, s.out<R>() + at, count, op);
              });
        },
        LayoutRule::elementwise, given);
  }
  // Each output element reads the same position of an operand of the output's shape, so such
  // an operand may be the output itself.
  const Strides ta = broadcast_strides(sa.shape(), out);
  const Strides tb = broadcast_strides(sb.shape(), out);
  return launch<R>(
      dev, info(), out, inputs,
      [out, ta, tb, op](const Step& s) {
        kernels::zip_broadcast(s.in<T>(0), s.in<T>(1), s.out<R>(), out, ta, tb, op, s.runner());
      },
      LayoutRule::row_major, given);
}

/// `op(a, value)` (or `op(value, a)` when `value_first`) for every element of a; `given` and
/// `name` as for zip_arrays.
template <class R, Element T, class Op>
DeviceArray<R> zip_scalar(std::string_view name, const DeviceArray<T>& a, T value, bool value_first,
                          Op op, std::uint32_t given) {
  Step& sa = step_of(name, a);
  Step* inputs[] = {&sa};
  const auto n = static_cast<double>(sa.shape().numel());
  const auto v = static_cast<kernels::compute_t<T>>(value);
  return launch<R>(
      sa.device(),
      // Built in launch's parameter, as a unary op's: a moved StepInfo costs some 40
      // instructions a step.
      {StepKind::compute, StepName::of_static(name),
       {n, bytes_of(sa), n * static_cast<double>(sizeof(R))}},
      sa.shape(), inputs,
      [v, value_first, op](const Step& s) {
        for_each_element_run(s, sizeof(T) + sizeof(R), [&](std::size_t at, std::size_t count) {
          if (value_first) {
            kernels::map(s.in<T>(0) + at, s.out<R>() + at, count, [&](auto x) { return op(v, x); });
          } else {
            kernels::map(s.in<T>(0) + at, s.out<R>() + at, count, [&](auto x) { return op(x, v); });
          }
        });
      },
      LayoutRule::elementwise, given);
}

/// The value of this call of a SymFloat (or SymInt) scalar as an element of T, converted as a
/// double scalar is (kernels::convert_value); reading it is not a guard.
template <Floating T, class S>
T sym_scalar(const S& s) {
  if constexpr (std::is_same_v<S, SymInt>) {
    return kernels::convert_value<T>(static_cast<double>(SymAccess::value(s)));
  } else {
    return kernels::convert_value<T>(SymFloatAccess::value(s));
  }
}

/// A binary elementwise op as a function object, callable as op(array, array),
/// op(array, scalar) and op(scalar, array), each operand by forwarding reference: an array
/// given away (`std::move(w)`, a temporary) may have its buffer reused for the result, and
/// its handle is left empty. `kMask` ops (comparisons) return bool arrays.
template <class Op, bool kMask = false>
struct BinaryOp {
  std::string_view name;  // static storage (a literal): its steps keep a view of it

  template <class T>
  using result_t = std::conditional_t<kMask, bool, T>;

  template <class L, class R>
  auto operator()(L&& l, R&& r) const {
    // Bit 0 is the first array operand, bit 1 the second.
    constexpr std::uint32_t given = AnyArray<L> && AnyArray<R>
                                        ? (kGiven<L> ? 1u : 0u) | (kGiven<R> ? 2u : 0u)
                                        : (kGiven<L> || kGiven<R> ? 1u : 0u);
    RecordScope scope;
    auto out = apply(std::as_const(l), std::as_const(r), given);
    // A call apply refuses with a static_assert goes no further: the rest would only add
    // errors of its own after ferry's message.
    if constexpr (computes<L, R>()) {
      if (Recorder* rec = scope.recorder())
        record_call(*rec, std::as_const(l), std::as_const(r), out);
      if (Tape* tape = scope.tape())
        record_grad_call(*tape, std::as_const(l), std::as_const(r), out);
      consume(std::forward<L>(l));
      consume(std::forward<R>(r));
    }
    return out;
  }

  /// Whether the op computes on (L, R), rather than accepting it only to refuse it with a
  /// static_assert: two element types, arithmetic on masks, a floating scalar with integers.
  template <class L, class R>
  static constexpr bool computes() {
    using A = std::remove_cvref_t<L>;
    using B = std::remove_cvref_t<R>;
    if constexpr (AnyArray<A> && AnyArray<B>) {
      using T = typename A::value_type;
      return std::is_same_v<T, typename B::value_type> && (Numeric<T> || kAnyElement);
    } else if constexpr (AnyArray<A>) {
      return ScalarFor<B, typename A::value_type> || SymScalarFor<B, typename A::value_type>;
    } else {
      return ScalarFor<A, typename B::value_type> || SymScalarFor<A, typename B::value_type>;
    }
  }

  // ---- what a program trace records of each call form ----

  template <Element T>
  void record_call(Recorder& rec, const DeviceArray<T>& a, const DeviceArray<T>& b,
                   const DeviceArray<result_t<T>>& out) const {
    Step& sa = *ArrayAccess::step(a);
    Step& sb = *ArrayAccess::step(b);
    const Shape ua = rec.shape_of(sa);
    const Shape ub = rec.shape_of(sb);
    const bool same = same_shape_rule(ua, ub);
    OpCall call{name, {&sa, &sb}, {},
                [op = *this](std::span<Step* const> in, std::span<const std::int64_t>) {
                  return handle_of(op.apply(as_array<T>(in[0]), as_array<T>(in[1]), 0));
                }};
    // A broadcasting op is fused too: at replay the kernel checks that each operand has the
    // output's shape or repeats along it, and submits the run op by op otherwise.
    if constexpr (!kMask) call.elementwise = {&fused_zip<T, Op>, &launch_fused<T>, dtype_of<T>, {}};
    record(rec, std::move(call), out, same ? ua : broadcast_rule(ua, ub));
  }

  template <Element T, class S>
  void record_call(Recorder& rec, const DeviceArray<T>& a, const S& value,
                   const DeviceArray<result_t<T>>& out) const {
    if constexpr (SymScalarFor<S, T>) {
      record_sym_scalar<false>(rec, a, SymFloat(value), out);
    } else {
      record_scalar<false>(rec, a, kernels::convert_value<T>(value), out);
    }
  }

  template <class S, Element T>
  void record_call(Recorder& rec, const S& value, const DeviceArray<T>& a,
                   const DeviceArray<result_t<T>>& out) const {
    if constexpr (SymScalarFor<S, T>) {
      record_sym_scalar<true>(rec, a, SymFloat(value), out);
    } else {
      record_scalar<true>(rec, a, kernels::convert_value<T>(value), out);
    }
  }

  template <bool kValueFirst, Element T>
  void record_scalar(Recorder& rec, const DeviceArray<T>& a, T v,
                     const DeviceArray<result_t<T>>& out) const {
    Step& sa = *ArrayAccess::step(a);
    OpCall call{name, {&sa}, {},
                [op = *this, v](std::span<Step* const> in, std::span<const std::int64_t>) {
                  return kValueFirst ? handle_of(op.apply(v, as_array<T>(in[0]), 0))
                                     : handle_of(op.apply(as_array<T>(in[0]), v, 0));
                }};
    if constexpr (!kMask) {
      call.elementwise = {&fused_scalar<T, Op, kValueFirst>, &launch_fused<T>, dtype_of<T>, {}};
      const auto c = static_cast<kernels::compute_t<T>>(v);
      static_assert(sizeof c <= sizeof call.elementwise.scalar);
      std::memcpy(call.elementwise.scalar.data(), &c, sizeof c);
    }
    record(rec, std::move(call), out, rec.shape_of(sa));
  }

  /// A SymFloat scalar: symbolic in this trace, it is the op's parameter, which each replay
  /// evaluates for its call; else a constant, as a plain number is.
  template <bool kValueFirst, Floating T>
  void record_sym_scalar(Recorder& rec, const DeviceArray<T>& a, const SymFloat& s,
                         const DeviceArray<result_t<T>>& out) const {
    const double traced = SymFloatAccess::value(s);
    if (SymFloatAccess::node(s) == 0) {
      record_scalar<kValueFirst>(rec, a, kernels::convert_value<T>(traced), out);
      return;
    }
    Step& sa = *ArrayAccess::step(a);
    OpCall call{name, {&sa}, {SymFloatAccess::word(s)},
                [op = *this](std::span<Step* const> in, std::span<const std::int64_t> p) {
                  const T v = kernels::convert_value<T>(word_float(p[0]));
                  return kValueFirst ? handle_of(op.apply(v, as_array<T>(in[0]), 0))
                                     : handle_of(op.apply(as_array<T>(in[0]), v, 0));
                }};
    if constexpr (!kMask) {
      call.elementwise = {&fused_scalar<T, Op, kValueFirst>, &launch_fused<T>, dtype_of<T>, {},
                          &fused_scalar_from_param<T>};
      fused_scalar_from_param<T>(float_word(traced), call.elementwise.scalar.data());
    }
    record(rec, std::move(call), out, rec.shape_of(sa));
  }

  // ---- what a gradient tape records of each call form (comparisons have no gradient) ----

  template <Element T>
  void record_grad_call(Tape& tape, const DeviceArray<T>& a, const DeviceArray<T>& b,
                        const DeviceArray<result_t<T>>& out) const {
    Step* in[] = {ArrayAccess::step(a), ArrayAccess::step(b)};
    if constexpr (kMask) {
      record_no_grad(tape, in, *ArrayAccess::step(out));
    } else {
      record_grad<T>(tape, in, *ArrayAccess::step(out),
                     [](auto t, GradCall& c) { binary_backward<Op>(t, c); });
    }
  }

  template <Element T, class S>
  void record_grad_call(Tape& tape, const DeviceArray<T>& a, const S& value,
                        const DeviceArray<result_t<T>>& out) const {
    if constexpr (SymScalarFor<S, T>) {
      record_grad_sym(tape, a, SymFloat(value), false, out);
    } else {
      record_grad_scalar(tape, a, kernels::convert_value<T>(value), false, out);
    }
  }

  template <class S, Element T>
  void record_grad_call(Tape& tape, const S& value, const DeviceArray<T>& a,
                        const DeviceArray<result_t<T>>& out) const {
    if constexpr (SymScalarFor<S, T>) {
      record_grad_sym(tape, a, SymFloat(value), true, out);
    } else {
      record_grad_scalar(tape, a, kernels::convert_value<T>(value), true, out);
    }
  }

  /// A SymFloat scalar is a constant of the gradient; its rule keeps it a SymFloat, so that a
  /// gradient taken inside a traced program reads each call's value too.
  template <Floating T>
  void record_grad_sym(Tape& tape, const DeviceArray<T>& a, const SymFloat& s, bool value_first,
                       const DeviceArray<result_t<T>>& out) const {
    Step* in[] = {ArrayAccess::step(a)};
    if constexpr (kMask) {
      record_no_grad(tape, in, *ArrayAccess::step(out));
    } else {
      record_grad<T>(tape, in, *ArrayAccess::step(out), [s, value_first](auto t, GradCall& c) {
        sym_scalar_backward<Op>(t, c, s, value_first);
      });
    }
  }

  template <Element T>
  void record_grad_scalar(Tape& tape, const DeviceArray<T>& a, T v, bool value_first,
                          const DeviceArray<result_t<T>>& out) const {
    Step* in[] = {ArrayAccess::step(a)};
    if constexpr (kMask) {
      record_no_grad(tape, in, *ArrayAccess::step(out));
    } else {
      record_grad<T>(tape, in, *ArrayAccess::step(out), [v, value_first](auto t, GradCall& c) {
        scalar_backward<Op>(t, c, v, value_first);
      });
    }
  }

  // Logical ops take bool operands too; the others need numbers.
  static constexpr bool kAnyElement = requires { Op::kAnyElement; };

  template <Element A, Element B>
  DeviceArray<result_t<A>> apply(const DeviceArray<A>& a, const DeviceArray<B>& b,
                                 std::uint32_t given) const {
    check_same_element<A, B>();
    if constexpr (!kAnyElement) check_numeric<A>();
    if constexpr (std::is_same_v<A, B> && (Numeric<A> || kAnyElement)) {
      return zip_arrays<result_t<A>>(name, a, b, Op{}, given);
    } else {
      return {};
    }
  }

  template <Element T, class S>
    requires ScalarFor<S, T>
  DeviceArray<result_t<T>> apply(const DeviceArray<T>& a, S value, std::uint32_t given) const {
    return zip_scalar<result_t<T>>(name, a, kernels::convert_value<T>(value), false, Op{}, given);
  }

  template <class S, Element T>
    requires ScalarFor<S, T>
  DeviceArray<result_t<T>> apply(S value, const DeviceArray<T>& a, std::uint32_t given) const {
    return zip_scalar<result_t<T>>(name, a, kernels::convert_value<T>(value), true, Op{}, given);
  }

  /// A SymFloat (or SymInt) scalar: the value of this call, converted as a double scalar is.
  template <Element T, class S>
    requires SymScalarFor<S, T>
  DeviceArray<result_t<T>> apply(const DeviceArray<T>& a, const S& value,
                                 std::uint32_t given) const {
    return zip_scalar<result_t<T>>(name, a, sym_scalar<T>(value), false, Op{}, given);
  }

  template <class S, Element T>
    requires SymScalarFor<S, T>
  DeviceArray<result_t<T>> apply(const S& value, const DeviceArray<T>& a,
                                 std::uint32_t given) const {
    return zip_scalar<result_t<T>>(name, a, sym_scalar<T>(value), true, Op{}, given);
  }

  template <Element T, class S>
    requires FloatingScalarForIntegers<S, T>
  DeviceArray<result_t<T>> apply(const DeviceArray<T>&, S, std::uint32_t) const {
    check_scalar_for<S, T>();
    return {};
  }

  template <class S, Element T>
    requires FloatingScalarForIntegers<S, T>
  DeviceArray<result_t<T>> apply(S, const DeviceArray<T>&, std::uint32_t) const {
    check_scalar_for<S, T>();
    return {};
  }
};

/// True when BinaryOp<Op> accepts (L, R): two arrays, or an array and a scalar (a SymFloat
/// with a floating array included).
template <class Op, class L, class R>
concept BinaryArgs = requires(const std::remove_cvref_t<L>& l, const std::remove_cvref_t<R>& r) {
  BinaryOp<Op>{}.apply(l, r, 0u);
};

}  // namespace ferry::detail
