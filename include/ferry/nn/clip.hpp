#pragma once
// nn::clip_grad_norm: gradients scaled down together when their joint norm is too large, as
// PyTorch's clip_grad_norm_ does. Everything stays on the device, the norm included, so a
// training step that clips still never waits for the host (PyTorch reads nothing back either;
// deciding on the host whether to clip would cost a sync every step).

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry::nn {

namespace detail {

/// Scales `grads` in place (new handles) by min(1, max_norm / (norm + 1e-6)) and returns the
/// norm; every check comes first, so a bad call submits nothing. `label(i)` names gradient i.
template <class Label>
DeviceArray<float> clip_in_place(std::span<DeviceArray<float>* const> grads, double max_norm,
                                 Label label) {
  constexpr std::string_view op = "nn::clip_grad_norm";
  if (!(max_norm >= 0) || !std::isfinite(max_norm)) {
    ferry::detail::fail<InvalidArgument>(op, "invalid max_norm ", max_norm,
                                         ": it must be finite and not negative");
  }
  if (grads.empty()) {
    ferry::detail::fail<InvalidArgument>(
        op, "no gradients were given, so there is no device for the norm");
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i]->valid())
      ferry::detail::fail<InvalidArgument>(op, label(i), " is an empty array");
  }
  const Device device = grads[0]->device();
  for (std::size_t i = 1; i < grads.size(); ++i) {
    const Device d = grads[i]->device();
    if (d != device) {
      ferry::detail::fail<DeviceMismatch>(op, label(i), " lives on ", d.name(), ", ", label(0),
                                          " on ", device.name());
    }
  }
  // The 2-norm of all the gradients as one vector: the square root of every square summed
  // (each sum accumulates in double, as ferry's sums do).
  DeviceArray<float> squares = sum(square(*grads[0]));
  for (std::size_t i = 1; i < grads.size(); ++i)
    squares = std::move(squares) + sum(square(*grads[i]));
  DeviceArray<float> norm = sqrt(std::move(squares));
  // PyTorch's factor, in float32: scaling by exactly 1 when under the limit leaves the values
  // as they were, and no branch on the norm means no host sync.
  const DeviceArray<float> factor = minimum(static_cast<float>(max_norm) / (norm + 1e-6f), 1.0f);
  for (DeviceArray<float>* g : grads) *g = std::move(*g) * factor;
  return norm;
}

}  // namespace detail

/// The gradients scaled together so that their joint 2-norm is at most `max_norm`, and that
/// norm before scaling, as PyTorch's clip_grad_norm_ (norm_type 2): each gradient times
/// min(1, max_norm / (norm + 1e-6)), in float32. The norm is a rank-0 array on the gradients'
/// device, and nothing is exported: both return at once, and inside ferry::jit they are traced.
/// A non-finite norm (a NaN or infinite gradient) gives non-finite gradients, as PyTorch does
/// without error_if_nonfinite. Takes `grads` by value: give them away (`std::move(grads)`) and
/// the scaling may reuse their buffers. Throws, before anything is submitted, InvalidArgument
/// naming nn::clip_grad_norm for a negative or non-finite max_norm, no gradients, or an empty
/// one (named); DeviceMismatch naming two gradients on different devices.
inline std::pair<NamedParameters, DeviceArray<float>> clip_grad_norm(NamedParameters grads,
                                                                     double max_norm) {
  std::vector<DeviceArray<float>*> arrays;
  arrays.reserve(grads.size());
  for (auto& entry : grads) arrays.push_back(&entry.second);
  DeviceArray<float> norm = detail::clip_in_place(
      arrays, max_norm, [&](std::size_t i) { return "gradient '" + grads[i].first + "'"; });
  return {std::move(grads), std::move(norm)};
}

/// clip_grad_norm for gradients by position (as Optimizer::step(params, grads) takes them),
/// naming them by position in its errors.
inline std::pair<std::vector<DeviceArray<float>>, DeviceArray<float>> clip_grad_norm(
    std::vector<DeviceArray<float>> grads, double max_norm) {
  std::vector<DeviceArray<float>*> arrays;
  arrays.reserve(grads.size());
  for (DeviceArray<float>& g : grads) arrays.push_back(&g);
  DeviceArray<float> norm = detail::clip_in_place(
      arrays, max_norm, [](std::size_t i) { return "gradient " + std::to_string(i); });
  return {std::move(grads), std::move(norm)};
}

}  // namespace ferry::nn
