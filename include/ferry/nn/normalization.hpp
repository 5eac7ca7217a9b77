#pragma once
// nn::LayerNorm and nn::RMSNorm over the last axis, named and initialized as PyTorch's ("weight"
// ones, "bias" zeros), on the layer_norm and rms_norm ops.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/normalization.hpp"

namespace ferry::nn {

namespace detail {

/// Throws ShapeError naming `module` unless x is (..., size).
inline void check_last_axis(std::string_view module, const Shape& x, std::int64_t size) {
  // The last size as a SymInt (dims() would pin the batch size of a traced input).
  if (x.rank() == 0 || x[x.rank() - 1] != size) {
    ferry::detail::fail<ShapeError>(module, "input ", x, " does not end in normalized_shape ",
                                    size);
  }
}

}  // namespace detail

/// How a LayerNorm is made besides its size and device (PyTorch's defaults).
struct LayerNormOptions {
  /// Added to the variance.
  double eps = 1e-5;
  /// Whether it has a learned "weight" (and, with `bias`, a "bias").
  bool elementwise_affine = true;
  /// Whether it has a "bias" (only with elementwise_affine).
  bool bias = true;
};

/// (x - mean) / sqrt(var + eps) over the last axis, then * weight + bias: PyTorch's
/// nn.LayerNorm(normalized_shape) for a single normalized size. Parameters "weight" and "bias"
/// (normalized_shape), ones and zeros.
class LayerNorm : public Module {
 public:
  /// A layer on `device` (the host CPU device unless given). Throws InvalidArgument for a
  /// negative size or an eps that is negative or not finite, and what to_device throws.
  explicit LayerNorm(std::int64_t normalized_shape, const Device& device = Device::cpu(),
                     LayerNormOptions options = {})
      : size_(normalized_shape), eps_(options.eps) {
    if (normalized_shape < 0 ||
        !(options.eps >= 0 && options.eps < std::numeric_limits<double>::infinity())) {
      ferry::detail::fail<InvalidArgument>(
          "LayerNorm", "needs normalized_shape >= 0 and a finite eps >= 0, got ", normalized_shape,
          " and ", options.eps);
    }
    if (options.elementwise_affine) {
      weight_ = register_parameter("weight", ones<float>(device, Shape{normalized_shape}));
      if (options.bias)
        bias_ = register_parameter("bias", zeros<float>(device, Shape{normalized_shape}));
    }
  }

  std::string_view type_name() const override { return "LayerNorm"; }

  /// The normalized size and the epsilon; never throw.
  std::int64_t normalized_shape() const noexcept { return size_; }
  double eps() const noexcept { return eps_; }

  /// The scale, (normalized_shape). Throws InvalidArgument for a layer made without one.
  const DeviceArray<float>& weight() const {
    if (!weight_) ferry::detail::fail<InvalidArgument>("LayerNorm", "this layer has no weight");
    return parameter(*weight_);
  }
  /// The shift, (normalized_shape). Throws InvalidArgument for a layer made without one.
  const DeviceArray<float>& bias() const {
    if (!bias_) ferry::detail::fail<InvalidArgument>("LayerNorm", "this layer has no bias");
    return parameter(*bias_);
  }

 protected:
  /// Throws ShapeError naming LayerNorm unless x is (..., normalized_shape).
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    detail::check_last_axis("LayerNorm", x.shape(), size_);
    return layer_norm(x, {.weight = weight_ ? parameter(*weight_) : DeviceArray<float>{},
                          .bias = bias_ ? parameter(*bias_) : DeviceArray<float>{},
                          .eps = eps_});
  }

 private:
  std::int64_t size_;
  double eps_;
  std::optional<std::size_t> weight_;
  std::optional<std::size_t> bias_;
};

/// How an RMSNorm is made besides its size and device.
struct RMSNormOptions {
  /// Added to the mean square. PyTorch's default (eps=None) is the input type's machine
  /// epsilon, so float32's, 2^-23, is the default here (the rms_norm op's own is 1e-5).
  double eps = std::numeric_limits<float>::epsilon();
  /// Whether it has a learned "weight".
  bool elementwise_affine = true;
};

/// x / sqrt(mean(x^2) + eps) over the last axis, then * weight: PyTorch's
/// nn.RMSNorm(normalized_shape) for a single normalized size. Parameter "weight"
/// (normalized_shape), ones.
class RMSNorm : public Module {
 public:
  /// A layer on `device` (the host CPU device unless given). Throws InvalidArgument for a
  /// negative size or an eps that is negative or not finite, and what to_device throws.
  explicit RMSNorm(std::int64_t normalized_shape, const Device& device = Device::cpu(),
                   RMSNormOptions options = {})
      : size_(normalized_shape), eps_(options.eps) {
    if (normalized_shape < 0 ||
        !(options.eps >= 0 && options.eps < std::numeric_limits<double>::infinity())) {
      ferry::detail::fail<InvalidArgument>(
          "RMSNorm", "needs normalized_shape >= 0 and a finite eps >= 0, got ", normalized_shape,
          " and ", options.eps);
    }
    if (options.elementwise_affine) {
      weight_ = register_parameter("weight", ones<float>(device, Shape{normalized_shape}));
    }
  }

  std::string_view type_name() const override { return "RMSNorm"; }

  /// The normalized size and the epsilon; never throw.
  std::int64_t normalized_shape() const noexcept { return size_; }
  double eps() const noexcept { return eps_; }

  /// The scale, (normalized_shape). Throws InvalidArgument for a layer made without one.
  const DeviceArray<float>& weight() const {
    if (!weight_) ferry::detail::fail<InvalidArgument>("RMSNorm", "this layer has no weight");
    return parameter(*weight_);
  }

 protected:
  /// Throws ShapeError naming RMSNorm unless x is (..., normalized_shape).
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    detail::check_last_axis("RMSNorm", x.shape(), size_);
    return rms_norm(x,
                    {.weight = weight_ ? parameter(*weight_) : DeviceArray<float>{}, .eps = eps_});
  }

 private:
  std::int64_t size_;
  double eps_;
  std::optional<std::size_t> weight_;
};

}  // namespace ferry::nn
