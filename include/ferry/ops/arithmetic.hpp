#pragma once
// Arithmetic with NumPy broadcasting: + - * / maximum minimum pow. Each takes two arrays of one
// element type, an array and a scalar, or a scalar and an array; integer semantics (wrapping,
// division by zero) are those of kernels/arith.hpp. Shape errors are thrown at the call.

#include "ferry/kernels/arith.hpp"
#include "ferry/ops/binary.hpp"

namespace ferry {

/// a + b elementwise. Throws ShapeError if the shapes do not broadcast, DeviceMismatch for
/// arrays of two devices, InvalidArgument for an empty handle.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Add, L, R>
auto add(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Add>{"add"}(a, b);
}

/// a - b elementwise; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Subtract, L, R>
auto subtract(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Subtract>{"subtract"}(a, b);
}

/// a * b elementwise; throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Multiply, L, R>
auto multiply(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Multiply>{"multiply"}(a, b);
}

/// a / b elementwise; throws like add. An integer division by zero reaches the exports that
/// depend on it as InvalidArgument.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Divide, L, R>
auto divide(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Divide>{"divide"}(a, b);
}

/// The larger of a and b elementwise (NaN if either is NaN); throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Maximum, L, R>
auto maximum(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Maximum>{"maximum"}(a, b);
}

/// The smaller of a and b elementwise (NaN if either is NaN); throws like add.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Minimum, L, R>
auto minimum(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Minimum>{"minimum"}(a, b);
}

/// a raised to the power b elementwise; throws like add. A negative integer exponent reaches
/// the exports as InvalidArgument.
template <class L, class R>
  requires detail::BinaryArgs<kernels::Pow, L, R>
auto pow(const L& a, const R& b) {
  return detail::BinaryOp<kernels::Pow>{"pow"}(a, b);
}

template <class L, class R>
  requires detail::BinaryArgs<kernels::Add, L, R>
auto operator+(const L& a, const R& b) {
  return add(a, b);
}
template <class L, class R>
  requires detail::BinaryArgs<kernels::Subtract, L, R>
auto operator-(const L& a, const R& b) {
  return subtract(a, b);
}
template <class L, class R>
  requires detail::BinaryArgs<kernels::Multiply, L, R>
auto operator*(const L& a, const R& b) {
  return multiply(a, b);
}
template <class L, class R>
  requires detail::BinaryArgs<kernels::Divide, L, R>
auto operator/(const L& a, const R& b) {
  return divide(a, b);
}

}  // namespace ferry
