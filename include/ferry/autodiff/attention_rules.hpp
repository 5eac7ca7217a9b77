#pragma once
// The backward rule of scaled_dot_product_attention. It recomputes the probabilities
// P = softmax(scale q k^T + mask) with ops (the forward kernel keeps none of them), then
// dV = P^T g, dS = P * (g v^T - rowsum(g v^T * P)), dQ = scale dS k, dK = scale dS^T q and
// dMask = dS summed back to the mask's shape: written with ops, so it is differentiable again.

#include <cstddef>
#include <limits>
#include <vector>

#include "ferry/autodiff/support.hpp"
#include "ferry/ops/attention.hpp"
#include "ferry/ops/axes.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/softmax.hpp"
#include "ferry/ops/triangular.hpp"

namespace ferry::detail {

template <Floating T>
void attention_backward(Tag<T>, GradCall& c, double scale, bool causal, bool has_mask) {
  const DeviceArray<T> q = input_of<T>(c, 0);
  const DeviceArray<T> k = input_of<T>(c, 1);
  const DeviceArray<T> v = input_of<T>(c, 2);
  const DeviceArray<T> g = cotangent_of<T>(c);
  DeviceArray<T> s = matmul(q, swapaxes(k, -2, -1)) * scale;
  if (has_mask) s = std::move(s) + input_of<T>(c, 3);
  if (causal) {
    const Shape shape = s.shape();
    const DeviceArray<bool> seen =
        tril(ones<bool>(q.device(), Shape{shape[shape.rank() - 2], shape[shape.rank() - 1]}));
    s = where(seen, s, -std::numeric_limits<double>::infinity());
  }
  const DeviceArray<T> p = softmax(s, -1);
  // dS serves q, k and the mask only: v alone (keys and queries that reach no variable) needs
  // just P. Each cotangent asked for comes from the same ops in the same order.
  const bool need_mask = has_mask && c.needs(3);
  DeviceArray<T> ds;
  if (c.needs(0) || c.needs(1) || need_mask) {
    const DeviceArray<T> dp = matmul(g, swapaxes(v, -2, -1));
    ds = p * (dp - sum(dp * p, {-1}, true));
  }
  if (c.needs(0)) set_grad(c, 0, matmul(ds, k) * scale);
  if (c.needs(1)) set_grad(c, 1, matmul(swapaxes(ds, -2, -1), q) * scale);
  if (c.needs(2)) set_grad(c, 2, matmul(swapaxes(p, -2, -1), g));
  if (need_mask) set_grad(c, 3, reduce_to(ds, *c.inputs[3]));
}

}  // namespace ferry::detail
