#pragma once
// Comparisons, which produce bool masks, and `where`, which selects by a mask. All broadcast.

#include <array>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/kernels/arith.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/elementwise.hpp"
#include "ferry/ops/binary.hpp"
#include "ferry/ops/gradient.hpp"
#include "ferry/ops/record.hpp"

namespace ferry {

/// a < b elementwise, as a bool mask; takes arrays and scalars like add, and throws like it. A
/// scalar converts to the array's type first, as in add: `u8 > -1` compares with 255.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Less, L, R>
auto less(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Less, true>{"less"}(std::forward<L>(a), std::forward<R>(b));
}

/// a > b elementwise, as a bool mask; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Greater, L, R>
auto greater(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Greater, true>{"greater"}(std::forward<L>(a),
                                                             std::forward<R>(b));
}

/// a == b elementwise, as a bool mask (NaN equals nothing); bool masks compare too, as
/// NumPy's. Throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Equal, L, R>
auto equal(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Equal, true>{"equal"}(std::forward<L>(a), std::forward<R>(b));
}

/// a <= b elementwise, as a bool mask; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::LessEqual, L, R>
auto less_equal(L&& a, R&& b) {
  return detail::BinaryOp<kernels::LessEqual, true>{"less_equal"}(std::forward<L>(a),
                                                                  std::forward<R>(b));
}

/// a >= b elementwise, as a bool mask; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::GreaterEqual, L, R>
auto greater_equal(L&& a, R&& b) {
  return detail::BinaryOp<kernels::GreaterEqual, true>{"greater_equal"}(std::forward<L>(a),
                                                                       std::forward<R>(b));
}

/// a != b elementwise, as a bool mask (true where either is NaN); bool masks compare too.
/// Throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::NotEqual, L, R>
auto not_equal(L&& a, R&& b) {
  return detail::BinaryOp<kernels::NotEqual, true>{"not_equal"}(std::forward<L>(a),
                                                                std::forward<R>(b));
}

/// a and b elementwise by truth (non-zero is true), as a bool mask; takes bool masks and any
/// other element type, as NumPy; broadcasts and throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::LogicalAnd, L, R>
auto logical_and(L&& a, R&& b) {
  return detail::BinaryOp<kernels::LogicalAnd, true>{"logical_and"}(std::forward<L>(a),
                                                                    std::forward<R>(b));
}

/// a or b elementwise by truth, like logical_and.
template <class L, class R>
  requires detail::BinaryArgs<kernels::LogicalOr, L, R>
auto logical_or(L&& a, R&& b) {
  return detail::BinaryOp<kernels::LogicalOr, true>{"logical_or"}(std::forward<L>(a),
                                                                  std::forward<R>(b));
}

// The comparison operators are the ops above under another name: a bool mask, arrays and
// scalars on either side, broadcasting, errors, tracing and (no) gradients as theirs. `a == b`
// compares values, as in NumPy, not handles.

/// `a < b`: less(a, b). Throws like less.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Less, L, R>
auto operator<(L&& a, R&& b) {
  return less(std::forward<L>(a), std::forward<R>(b));
}

/// `a <= b`: less_equal(a, b). Throws like less_equal.
template <class L, class R>
  requires detail::BinaryArgs<kernels::LessEqual, L, R>
auto operator<=(L&& a, R&& b) {
  return less_equal(std::forward<L>(a), std::forward<R>(b));
}

/// `a > b`: greater(a, b). Throws like greater.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Greater, L, R>
auto operator>(L&& a, R&& b) {
  return greater(std::forward<L>(a), std::forward<R>(b));
}

/// `a >= b`: greater_equal(a, b). Throws like greater_equal.
template <class L, class R>
  requires detail::BinaryArgs<kernels::GreaterEqual, L, R>
auto operator>=(L&& a, R&& b) {
  return greater_equal(std::forward<L>(a), std::forward<R>(b));
}

/// `a == b`: equal(a, b), a mask of the elements that are equal (NaN equals nothing). Throws
/// like equal.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Equal, L, R>
auto operator==(L&& a, R&& b) {
  return equal(std::forward<L>(a), std::forward<R>(b));
}

/// `a != b`: not_equal(a, b). Throws like not_equal.
template <class L, class R>
  requires detail::BinaryArgs<kernels::NotEqual, L, R>
auto operator!=(L&& a, R&& b) {
  return not_equal(std::forward<L>(a), std::forward<R>(b));
}

namespace detail {

/// One operand of where: an array, or a scalar broadcast everywhere.
template <Element T>
struct Choice {
  Step* step = nullptr;  // null for a scalar
  T value{};
  /// A scalar given as a SymFloat: symbolic in a trace, it is the recorded op's parameter, which
  /// each replay evaluates (`value` is then this call's).
  SymFloat symbol{};
  const Shape& shape() const {
    static const Shape scalar;
    return step != nullptr ? step->shape() : scalar;
  }
};

template <Element T>
DeviceArray<T> select(const DeviceArray<bool>& mask, Choice<T> a, Choice<T> b) {
  constexpr std::string_view name = "where";
  RecordScope scope;
  Step& sm = step_of(name, mask);
  std::array<Step*, 3> all{&sm, a.step, b.step};
  std::array<Step*, 3> inputs{};
  std::size_t n_inputs = 0;
  for (Step* s : all) {
    if (s != nullptr) inputs[n_inputs++] = s;
  }
  const std::span<Step* const> used(inputs.data(), n_inputs);
  const std::shared_ptr<DeviceState>& dev = common_device(name, used);
  Shape out;
  try {
    out = broadcast_shapes(name, sm.shape(), broadcast_shapes(name, a.shape(), b.shape()));
  } catch (const ShapeError&) {  // name the three operands, not an intermediate shape
    fail<ShapeError>(name, "shapes ", sm.shape(), ", ", a.shape(), " and ", b.shape(),
                     " do not broadcast");
  }
  const Strides tm = broadcast_strides(sm.shape(), out);
  const Strides ta = broadcast_strides(a.shape(), out);
  const Strides tb = broadcast_strides(b.shape(), out);
  double read = 0;
  for (Step* s : used) read += bytes_of(*s);
  const auto n = static_cast<double>(out.numel());
  StepInfo info{StepKind::compute, name, {n, read, n * sizeof(T)}};
  // Input positions: the mask is 0, then whichever of a and b are arrays, in order. ia is a
  // constant the lambda reads without capturing (clang rejects capturing it as unused).
  constexpr std::size_t ia = 1;
  const std::size_t ib = a.step != nullptr ? 2 : 1;
  DeviceArray<T> result = launch<T>(dev, std::move(info), out, used,
                   [out, tm, ta, tb, a, b, ib](const Step& s) {
                     const T* pa = a.step != nullptr ? s.in<T>(ia) : &a.value;
                     const T* pb = b.step != nullptr ? s.in<T>(ib) : &b.value;
                     kernels::select(s.in<bool>(0), pa, pb, s.out<T>(), out, tm, ta, tb,
                                     s.runner());
                   });
  if (Tape* tape = scope.tape()) {
    const bool a_array = a.step != nullptr;
    const bool b_array = b.step != nullptr;
    record_grad<T>(
        *tape, used, *ArrayAccess::step(result),
        [a_array, b_array](auto t, GradCall& c) { select_backward(t, c, a_array, b_array); });
  }
  if (Recorder* rec = scope.recorder()) {
    auto user = [&](const Choice<T>& c) {
      return c.step != nullptr ? rec->shape_of(*c.step) : Shape{};
    };
    const bool a_array = a.step != nullptr;
    const bool b_array = b.step != nullptr;
    // A scalar that is an input of the trace is a parameter: a replay reads this call's value.
    std::vector<SymInt> params;
    const bool a_symbol = !a_array && SymFloatAccess::node(a.symbol) != 0;
    const bool b_symbol = !b_array && SymFloatAccess::node(b.symbol) != 0;
    if (a_symbol) params.push_back(SymFloatAccess::word(a.symbol));
    if (b_symbol) params.push_back(SymFloatAccess::word(b.symbol));
    record(*rec,
           {name, std::vector<Step*>(used.begin(), used.end()), std::move(params),
            [a_array, b_array, a_symbol, b_symbol, va = a.value, vb = b.value](
                std::span<Step* const> in, std::span<const std::int64_t> p) {
              const DeviceArray<bool> m = as_array<bool>(in[0]);
              std::size_t next = 1;
              const DeviceArray<T> xa = a_array ? as_array<T>(in[next++]) : DeviceArray<T>{};
              const DeviceArray<T> xb = b_array ? as_array<T>(in[next]) : DeviceArray<T>{};
              std::size_t param = 0;
              const T a_value = a_symbol ? kernels::convert_value<T>(word_float(p[param++])) : va;
              const T b_value = b_symbol ? kernels::convert_value<T>(word_float(p[param])) : vb;
              return handle_of(select<T>(m, {a_array ? ArrayAccess::step(xa) : nullptr, a_value},
                                         {b_array ? ArrayAccess::step(xb) : nullptr, b_value}));
            }},
           result, broadcast_rule(rec->shape_of(sm), broadcast_rule(user(a), user(b))));
  }
  return result;
}

}  // namespace detail

/// mask ? a : b elementwise, all three broadcast together. a and b share an element type
/// (else a compile error). Throws ShapeError, DeviceMismatch or InvalidArgument like add.
template <Element A, Element B>
DeviceArray<A> where(const DeviceArray<bool>& mask, const DeviceArray<A>& a,
                     const DeviceArray<B>& b) {
  detail::check_same_element<A, B>();
  if constexpr (std::is_same_v<A, B>) {
    return detail::select<A>(mask, {&detail::step_of("where", a)},
                             {&detail::step_of("where", b)});
  } else {
    return {};
  }
}

/// mask ? a : value.
template <Element T, class S>
  requires ScalarFor<S, T> || std::is_same_v<S, T>
DeviceArray<T> where(const DeviceArray<bool>& mask, const DeviceArray<T>& a, S value) {
  return detail::select<T>(mask, {&detail::step_of("where", a)},
                           {nullptr, kernels::convert_value<T>(value)});
}

/// mask ? value : b.
template <class S, Element T>
  requires ScalarFor<S, T> || std::is_same_v<S, T>
DeviceArray<T> where(const DeviceArray<bool>& mask, S value, const DeviceArray<T>& b) {
  return detail::select<T>(mask, {nullptr, kernels::convert_value<T>(value)},
                           {&detail::step_of("where", b)});
}

/// mask ? a : value, `value` a SymFloat (or a SymInt, read as one) and T floating: in a traced
/// program a symbolic value is an input of the trace, so a replay fills in each call's value
/// without tracing again. Converted to T as a double scalar is. Throws like the other forms.
template <Floating T>
DeviceArray<T> where(const DeviceArray<bool>& mask, const DeviceArray<T>& a,
                     const SymFloat& value) {
  return detail::select<T>(mask, {&detail::step_of("where", a)},
                           {nullptr, detail::sym_scalar<T>(value), value});
}

/// mask ? value : b, `value` a SymFloat; like the form above.
template <Floating T>
DeviceArray<T> where(const DeviceArray<bool>& mask, const SymFloat& value,
                     const DeviceArray<T>& b) {
  return detail::select<T>(mask, {nullptr, detail::sym_scalar<T>(value), value},
                           {&detail::step_of("where", b)});
}

}  // namespace ferry
