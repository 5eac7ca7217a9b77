#pragma once
// Arithmetic with NumPy broadcasting: + - * / maximum minimum pow clip. Each takes two arrays of
// one element type, an array and a scalar, or a scalar and an array; integer semantics (wrapping,
// division by zero) are those of kernels/arith.hpp. Shape errors are thrown at the call.

#include <string_view>
#include <utility>

#include "ferry/kernels/arith.hpp"
#include "ferry/ops/binary.hpp"

namespace ferry {

/// a + b elementwise. Throws ShapeError if the shapes do not broadcast, DeviceMismatch for
/// arrays of two devices, InvalidArgument for an empty handle.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Add, L, R>
auto add(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Add>{"add"}(std::forward<L>(a), std::forward<R>(b));
}

/// a - b elementwise; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Subtract, L, R>
auto subtract(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Subtract>{"subtract"}(std::forward<L>(a), std::forward<R>(b));
}

/// a * b elementwise; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Multiply, L, R>
auto multiply(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Multiply>{"multiply"}(std::forward<L>(a), std::forward<R>(b));
}

/// a / b elementwise; throws like add. An integer division by zero reaches the exports that
/// depend on it as InvalidArgument.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Divide, L, R>
auto divide(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Divide>{"divide"}(std::forward<L>(a), std::forward<R>(b));
}

/// The larger of a and b elementwise (NaN if either is NaN); throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Maximum, L, R>
auto maximum(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Maximum>{"maximum"}(std::forward<L>(a), std::forward<R>(b));
}

/// The smaller of a and b elementwise (NaN if either is NaN); throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Minimum, L, R>
auto minimum(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Minimum>{"minimum"}(std::forward<L>(a), std::forward<R>(b));
}

/// a raised to the power b elementwise; throws like add. A negative integer exponent reaches
/// the exports as InvalidArgument.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Pow, L, R>
auto pow(L&& a, R&& b) {
  return detail::BinaryOp<kernels::Pow>{"pow"}(std::forward<L>(a), std::forward<R>(b));
}

/// minimum(maximum(a, lo), hi): a limited to [lo, hi], NaN kept; lo and hi are scalars or
/// arrays that broadcast with a. As in NumPy, lo > hi gives hi everywhere. Its gradient is
/// that of the composition: 1 inside, 0 outside, 1/2 where a equals a bound (JAX's; PyTorch's
/// clamp passes 1 there). Its two steps are named clip, as its errors are. Throws like
/// maximum, naming clip.
template <class A, class L, class H>
  requires detail::BinaryArgs<kernels::Maximum, A, L>
auto clip(A&& a, L&& lo, H&& hi) {
  constexpr std::string_view name = "clip";
  return detail::BinaryOp<kernels::Minimum>{name}(
      detail::BinaryOp<kernels::Maximum>{name}(std::forward<A>(a), std::forward<L>(lo)),
      std::forward<H>(hi));
}

template <class L, class R>
  requires detail::BinaryArgs<kernels::Add, L, R>
auto operator+(L&& a, R&& b) {
  return add(std::forward<L>(a), std::forward<R>(b));
}
template <class L, class R>
  requires detail::BinaryArgs<kernels::Subtract, L, R>
auto operator-(L&& a, R&& b) {
  return subtract(std::forward<L>(a), std::forward<R>(b));
}
template <class L, class R>
  requires detail::BinaryArgs<kernels::Multiply, L, R>
auto operator*(L&& a, R&& b) {
  return multiply(std::forward<L>(a), std::forward<R>(b));
}
template <class L, class R>
  requires detail::BinaryArgs<kernels::Divide, L, R>
auto operator/(L&& a, R&& b) {
  return divide(std::forward<L>(a), std::forward<R>(b));
}

// Compound assignment rebinds the handle: `w -= x` is `w = std::move(w) - x`, so w's buffer
// is given to the result, which overwrites it in place when w held the only reference (see
// donation in README.md); with another handle to it kept, a new buffer is used. The right side
// is an array or a scalar, as for `-`, and broadcasting may give w a larger shape, as
// `w = w - x` would (ferry's arrays are immutable values, as JAX's; NumPy refuses an in-place
// update that does not fit w). Each throws like its op, and then leaves w as it was.

/// `w += x`: w = std::move(w) + x. Throws like add.
template <Element T, class R>
  requires detail::BinaryArgs<kernels::Add, DeviceArray<T>, R>
DeviceArray<T>& operator+=(DeviceArray<T>& w, R&& x) {
  w = add(std::move(w), std::forward<R>(x));
  return w;
}

/// `w -= x`: w = std::move(w) - x. Throws like subtract.
template <Element T, class R>
  requires detail::BinaryArgs<kernels::Subtract, DeviceArray<T>, R>
DeviceArray<T>& operator-=(DeviceArray<T>& w, R&& x) {
  w = subtract(std::move(w), std::forward<R>(x));
  return w;
}

/// `w *= x`: w = std::move(w) * x. Throws like multiply.
template <Element T, class R>
  requires detail::BinaryArgs<kernels::Multiply, DeviceArray<T>, R>
DeviceArray<T>& operator*=(DeviceArray<T>& w, R&& x) {
  w = multiply(std::move(w), std::forward<R>(x));
  return w;
}

/// `w /= x`: w = std::move(w) / x. Throws like divide.
template <Element T, class R>
  requires detail::BinaryArgs<kernels::Divide, DeviceArray<T>, R>
DeviceArray<T>& operator/=(DeviceArray<T>& w, R&& x) {
  w = divide(std::move(w), std::forward<R>(x));
  return w;
}

}  // namespace ferry
