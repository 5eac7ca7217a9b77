#pragma once
// layer_norm and rms_norm over the last axis, as MLX's fast.layer_norm / fast.rms_norm and
// PyTorch's with a one-dimensional normalized_shape. Both are compositions of ops: their
// gradients come from those ops, a jit trace replays them for any batch or sequence length, and
// a replayed program fuses their elementwise parts.

#include <cmath>
#include <string_view>
#include <type_traits>

#include "ferry/array.hpp"
#include "ferry/core/called_op.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry {

/// What layer_norm and rms_norm take besides the array: an optional scale and shift (empty
/// handles when absent), each of the last axis' size, and the epsilon added to the variance.
template <Floating T>
struct NormOptions {
  DeviceArray<T> weight{};  // initialized here, so `{.eps = 1e-6}` leaves nothing unset
  DeviceArray<T> bias{};
  double eps = 1e-5;
};

namespace detail {

/// Checks a normalization's arguments before anything is submitted.
template <Floating T>
void check_norm(std::string_view name, const DeviceArray<T>& x, const NormOptions<T>& o) {
  const Step& s = step_of(name, x);
  if (s.shape().rank() == 0) fail<ShapeError>(name, "needs an array of rank >= 1, got a scalar");
  if (!std::isfinite(o.eps) || o.eps < 0) {
    fail<InvalidArgument>(name, "eps must be finite and >= 0, got ", o.eps);
  }
  const Shape shape = x.shape();
  const SymInt last = shape[shape.rank() - 1];
  for (const auto* p : {&o.weight, &o.bias}) {
    if (!p->valid()) continue;
    const Shape ps = p->shape();
    const char* what = p == &o.weight ? "weight" : "bias";
    if (ps.rank() != 1 || ps[0] != last) {
      fail<ShapeError>(name, what, " must have the shape (", last, ") of x's last axis, got ", ps,
                       " for x of ", shape);
    }
    if (p->device() != x.device()) {
      fail<DeviceMismatch>(name, what, " lives on ", p->device().name(), ", x on ",
                           x.device().name());
    }
  }
}

template <Floating T>
DeviceArray<T> scale_and_shift(DeviceArray<T> y, const NormOptions<T>& o) {
  if (o.weight.valid()) y = std::move(y) * o.weight;
  if (o.bias.valid()) y = std::move(y) + o.bias;
  return y;
}

/// A half-precision normalization computed in float and rounded once (as PyTorch and MLX do):
/// in T, x^2 is inf for |x| > 256 in float16, and every step would round to T's 8 or 11 bits.
template <HalfFloating T, class Norm>
DeviceArray<T> norm_in_float(const DeviceArray<T>& x, const NormOptions<T>& o, Norm norm) {
  NormOptions<float> f{.eps = o.eps};
  if (o.weight.valid()) f.weight = o.weight.template astype<float>();
  if (o.bias.valid()) f.bias = o.bias.template astype<float>();
  return norm(x.template astype<float>(), f).template astype<T>();
}

}  // namespace detail

/// (x - mean) / sqrt(var + eps) over the last axis, then * weight + bias where given (the
/// biased variance, as PyTorch). float16 and bfloat16 are computed in float and rounded once to
/// T. Throws ShapeError for a scalar x or a weight or bias not of
/// x's last size, DeviceMismatch for one on another device, InvalidArgument for a negative or
/// non-finite eps or an empty handle. `layer_norm(x, {.weight = w, .bias = b, .eps = 1e-6})`.
template <Floating T>
DeviceArray<T> layer_norm(const DeviceArray<T>& x,
                          const std::type_identity_t<NormOptions<T>>& options = {}) {
  const detail::CalledOp called("layer_norm");
  detail::check_norm("layer_norm", x, options);
  if constexpr (HalfFloating<T>) {
    return detail::norm_in_float(x, options, [](const auto& y, const auto& f) {
      return layer_norm(y, f);
    });
  }
  DeviceArray<T> centered = x - mean(x, {-1}, true);
  DeviceArray<T> inv = rsqrt(mean(square(centered), {-1}, true) + options.eps);
  return detail::scale_and_shift(std::move(centered) * std::move(inv), options);
}

/// x / sqrt(mean(x^2) + eps) over the last axis, then * weight + bias where given (PyTorch's
/// RMSNorm, which has no bias, defaults eps to the type's epsilon; ferry to 1e-5 for both
/// norms, as MLX). float16 and bfloat16 are computed in float and rounded once to T. Throws
/// like layer_norm.
template <Floating T>
DeviceArray<T> rms_norm(const DeviceArray<T>& x,
                        const std::type_identity_t<NormOptions<T>>& options = {}) {
  const detail::CalledOp called("rms_norm");
  detail::check_norm("rms_norm", x, options);
  if constexpr (HalfFloating<T>) {
    return detail::norm_in_float(x, options, [](const auto& y, const auto& f) {
      return rms_norm(y, f);
    });
  }
  DeviceArray<T> inv = rsqrt(mean(square(x), {-1}, true) + options.eps);
  return detail::scale_and_shift(x * std::move(inv), options);
}

}  // namespace ferry
