#pragma once
// The backward rules of reductions, softmax and matmul. A max or min shares its cotangent
// equally among the elements tied for the extreme, as JAX and PyTorch do. A product's rule is
// written with ops (so it can be differentiated again) and never divides by a zero element.

#include <array>
#include <cstddef>
#include <numeric>
#include <vector>

#include "ferry/autodiff/support.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/broadcast.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/flip.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/scan.hpp"
#include "ferry/ops/reshape.hpp"

namespace ferry::detail {

/// `axes`, or every axis of a rank-`rank` array when it is empty (a reduction's "all").
inline std::vector<int> every_axis(const std::vector<int>& axes, std::size_t rank) {
  if (!axes.empty()) return axes;
  std::vector<int> all(rank);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

template <Floating T>
void reduce_backward(Tag<T>, GradCall& c, kernels::ReduceOp op, const std::vector<int>& axes,
                     bool keepdims) {
  const Step& in = *c.inputs[0];
  const Shape user = user_shape(in);
  const std::array<bool, kMaxRank> flags = reduced_axes("grad", axes, in.shape().rank());
  const Shape kept = kept_shape(user, flags);
  const DeviceArray<T> g = keepdims ? cotangent_of<T>(c) : reshape(cotangent_of<T>(c), kept);
  switch (op) {
    case kernels::ReduceOp::sum:
      set_grad(c, 0, broadcast_to(g, user));
      return;
    case kernels::ReduceOp::mean:
      set_grad(c, 0, expand("broadcast_mean", g, user, true));
      return;
    case kernels::ReduceOp::prod: {
      // d prod / d x_j is the product of the others. Its value: prod / x_j when no element is
      // 0, the product of the non-zero elements P at the one 0 when there is exactly one, 0
      // otherwise. Written so that it is differentiated again exactly at zeros too: at a
      // non-zero element it is Z P / x_j, Z the product of the zero elements (1 when there is
      // none: its own gradient is this rule again); at a zero, P times the product of the
      // other zeros: 1 for the only one, the other one for two (their sum less x_j), 0 for
      // three or more (right to the second order of prod, as every derivative of it there has
      // a zero factor until then).
      const DeviceArray<T> x = input_of<T>(c, 0);
      const DeviceArray<bool> is_zero = equal(x, T(0));
      const std::vector<int> all = every_axis(axes, in.shape().rank());
      const DeviceArray<T> zeros = sum(is_zero.astype<T>(), all, true);
      const DeviceArray<T> nonzero = where(is_zero, T(1), x);
      const DeviceArray<T> nonzero_prod = prod(nonzero, all, true);
      const DeviceArray<T> zero_prod = prod(where(is_zero, x, T(1)), all, true);
      const DeviceArray<T> other_zeros =
          where(equal(zeros, T(1)), T(1),
                where(equal(zeros, T(2)), sum(where(is_zero, x, T(0)), all, true) - x, T(0)));
      const DeviceArray<T> others = where(is_zero, nonzero_prod * other_zeros,
                                          zero_prod * (nonzero_prod / nonzero));
      set_grad(c, 0, g * others);
      return;
    }
    case kernels::ReduceOp::max:
    case kernels::ReduceOp::min: {
      const DeviceArray<T> x = input_of<T>(c, 0);
      const DeviceArray<T> y = keepdims ? output_of<T>(c) : reshape(output_of<T>(c), kept);
      const DeviceArray<bool> at_extreme = equal(x, y);
      const std::vector<int> all = every_axis(axes, in.shape().rank());
      const DeviceArray<T> ties = sum(at_extreme.astype<T>(), all, true);
      set_grad(c, 0, where(at_extreme, g / ties, T(0)));
      return;
    }
  }
}

template <Floating T>
void softmax_backward(Tag<T>, GradCall& c, int axis) {
  const DeviceArray<T> y = output_of<T>(c);
  const DeviceArray<T> g = cotangent_of<T>(c);
  set_grad(c, 0, y * (g - sum(g * y, {axis}, true)));
}

/// matmul's rule on the operands promoted to matrices (a vector `a` is a row, a vector `b` a
/// column): dA = dC B^T and dB = A^T dC, each summed over the batch dimensions its operand was
/// broadcast along and given its operand's shape again. An operand that depends on no variable
/// (a layer's input data) gets no cotangent: its product would be the size of the layer's
/// forward matmul, for nothing.
template <Floating T>
void matmul_backward(Tag<T>, GradCall& c) {
  const Step& sa = *c.inputs[0];
  const Step& sb = *c.inputs[1];
  const Shape ua = user_shape(sa);
  const Shape ub = user_shape(sb);
  const Shape pa = promoted(ua, true);
  const Shape pb = promoted(ub, false);
  const Shape uc = user_shape(c.output);
  // The cotangent with the dimensions a vector operand dropped put back: (batch..., m, n).
  const std::size_t kept = (ua.rank() != 1 ? 1u : 0u) + (ub.rank() != 1 ? 1u : 0u);
  std::array<SymInt, kMaxRank> dims{};
  std::size_t rank = 0;
  for (std::size_t i = 0; i + kept < uc.rank(); ++i) dims[rank++] = uc[i];
  dims[rank++] = pa[pa.rank() - 2];
  dims[rank++] = pb[pb.rank() - 1];
  const DeviceArray<T> g =
      reshape(cotangent_of<T>(c), Shape(std::span<const SymInt>(dims.data(), rank)));
  const DeviceArray<T> a = reshape(input_of<T>(c, 0), pa);
  const DeviceArray<T> b = reshape(input_of<T>(c, 1), pb);
  if (c.needs(0)) {
    set_grad(c, 0, reduce_to(matmul(g, swapaxes(b, -2, -1)), promoted(sa.shape(), true), ua));
  }
  if (c.needs(1)) {
    set_grad(c, 1, reduce_to(matmul(swapaxes(a, -2, -1), g), promoted(sb.shape(), false), ub));
  }
}

/// The reversed running sum: input j feeds every output from j on.
template <Floating T>
void cumsum_backward(Tag<T>, GradCall& c, int axis) {
  set_grad(c, 0, flip(cumsum(flip(cotangent_of<T>(c), axis), axis), axis));
}

}  // namespace ferry::detail
