#pragma once
// The machinery shared by every binary elementwise op: device and element-type checks,
// broadcasting, cost, and the three call forms (array-array, array-scalar, scalar-array).

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "ferry/array.hpp"
#include "ferry/core/broadcast.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/elementwise.hpp"

namespace ferry::detail {

template <class A, class B>
constexpr void check_same_element() {
  static_assert(std::is_same_v<A, B>,
                "ferry: the element types differ; convert one operand with astype<T>() first");
}

template <class T>
constexpr void check_numeric() {
  static_assert(Numeric<T>, "ferry: arithmetic needs a numeric element type, not bool; "
                            "convert the mask with astype<T>() first");
}

inline double bytes_of(const Step& s) { return static_cast<double>(s.output_bytes()); }

/// `op` applied elementwise to a and b, broadcast; results of type R.
template <class R, Element T, class Op>
DeviceArray<R> zip_arrays(std::string_view name, const DeviceArray<T>& a, const DeviceArray<T>& b,
                          Op op) {
  Step& sa = step_of(name, a);
  Step& sb = step_of(name, b);
  Step* inputs[] = {&sa, &sb};
  const std::shared_ptr<DeviceState>& dev = common_device(name, inputs);
  const bool same = sa.shape() == sb.shape();
  const Shape out = same ? sa.shape() : broadcast_shapes(name, sa.shape(), sb.shape());
  const auto n = static_cast<double>(out.numel());
  StepInfo info{StepKind::compute, std::string(name),
                {n, bytes_of(sa) + bytes_of(sb), n * static_cast<double>(sizeof(R))}};
  if (same) {
    const auto count = static_cast<std::size_t>(out.numel());
    return launch<R>(dev, std::move(info), out, inputs, [count, op](const Step& s) {
      kernels::zip(s.in<T>(0), s.in<T>(1), s.out<R>(), count, op);
    });
  }
  const Strides ta = broadcast_strides(sa.shape(), out);
  const Strides tb = broadcast_strides(sb.shape(), out);
  return launch<R>(dev, std::move(info), out, inputs, [out, ta, tb, op](const Step& s) {
    kernels::zip_broadcast(s.in<T>(0), s.in<T>(1), s.out<R>(), out, ta, tb, op);
  });
}

/// `op(a, value)` (or `op(value, a)` when `value_first`) for every element of a.
template <class R, Element T, class Op>
DeviceArray<R> zip_scalar(std::string_view name, const DeviceArray<T>& a, T value, bool value_first,
                          Op op) {
  Step& sa = step_of(name, a);
  Step* inputs[] = {&sa};
  const auto count = static_cast<std::size_t>(sa.shape().numel());
  const auto n = static_cast<double>(count);
  StepInfo info{StepKind::compute, std::string(name),
                {n, bytes_of(sa), n * static_cast<double>(sizeof(R))}};
  const auto v = static_cast<kernels::compute_t<T>>(value);
  if (value_first) {
    return launch<R>(sa.device(), std::move(info), sa.shape(), inputs, [count, v, op](const Step& s) {
      kernels::map(s.in<T>(0), s.out<R>(), count, [&](auto x) { return op(v, x); });
    });
  }
  return launch<R>(sa.device(), std::move(info), sa.shape(), inputs, [count, v, op](const Step& s) {
    kernels::map(s.in<T>(0), s.out<R>(), count, [&](auto x) { return op(x, v); });
  });
}

/// A binary elementwise op as a function object, callable as op(array, array),
/// op(array, scalar) and op(scalar, array). `kMask` ops (comparisons) return bool arrays.
template <class Op, bool kMask = false>
struct BinaryOp {
  std::string_view name;

  template <class T>
  using result_t = std::conditional_t<kMask, bool, T>;

  template <Element A, Element B>
  DeviceArray<result_t<A>> operator()(const DeviceArray<A>& a, const DeviceArray<B>& b) const {
    check_same_element<A, B>();
    check_numeric<A>();
    if constexpr (std::is_same_v<A, B> && Numeric<A>) {
      return zip_arrays<result_t<A>>(name, a, b, Op{});
    } else {
      return {};
    }
  }

  template <Element T, class S>
    requires ScalarFor<S, T>
  DeviceArray<result_t<T>> operator()(const DeviceArray<T>& a, S value) const {
    return zip_scalar<result_t<T>>(name, a, kernels::convert_value<T>(value), false, Op{});
  }

  template <class S, Element T>
    requires ScalarFor<S, T>
  DeviceArray<result_t<T>> operator()(S value, const DeviceArray<T>& a) const {
    return zip_scalar<result_t<T>>(name, a, kernels::convert_value<T>(value), true, Op{});
  }
};

/// True when BinaryOp<Op> accepts (L, R): two arrays, or an array and a scalar.
template <class Op, class L, class R>
concept BinaryArgs = requires(const L& l, const R& r) { BinaryOp<Op>{}(l, r); };

}  // namespace ferry::detail
