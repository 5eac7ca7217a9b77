#pragma once
// nn::Linear: y = x W^T + b, with W (out, in) and b (out) laid out and initialized as PyTorch
// does, so weights move between the two without reshaping.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/nn/init.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/matmul.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/transfer.hpp"

namespace ferry::nn {

/// How a Linear is made besides its sizes and device.
struct LinearOptions {
  /// Whether y gets a bias b.
  bool bias = true;
  /// The seed of the initial values; without one, nn::next_seed() picks it.
  std::optional<std::uint64_t> seed{};
};

/// A fully connected layer: x of shape (..., in_features) to y of shape (..., out_features),
/// y = x W^T + b. Parameters "weight" (out, in) and, with a bias, "bias" (out), both uniform in
/// [-1/sqrt(in), 1/sqrt(in)] as PyTorch starts them: weight first, then bias, from one stream.
class Linear : public Module {
 public:
  /// A layer with its parameters on `device` (the host CPU device unless given). Throws
  /// InvalidArgument for a negative size, and what to_device throws.
  Linear(std::int64_t in_features, std::int64_t out_features,
         const Device& device = Device::cpu(), LinearOptions options = {})
      : in_(in_features), out_(out_features) {
    if (in_features < 0 || out_features < 0) {
      ferry::detail::fail<InvalidArgument>("Linear", "sizes must not be negative, got in_features ",
                                           in_features, " and out_features ", out_features);
    }
    // PyTorch's kaiming_uniform_(a = sqrt(5)) on the weight reduces to this same bound.
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    detail::SplitMix64 gen(options.seed ? *options.seed : next_seed());
    std::vector<float> w;
    detail::append_uniform(w, static_cast<std::size_t>(in_features * out_features), -bound, bound,
                           gen);
    weight_ = register_parameter("weight",
                                 to_device(device, std::move(w), Shape{out_features, in_features}));
    if (options.bias) {
      std::vector<float> b;
      detail::append_uniform(b, static_cast<std::size_t>(out_features), -bound, bound, gen);
      bias_ = register_parameter("bias", to_device(device, std::move(b), Shape{out_features}));
    }
  }

  std::string_view type_name() const override { return "Linear"; }

  /// The sizes, and whether there is a bias; never throw.
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  bool has_bias() const noexcept { return bias_.has_value(); }

  /// The weight, (out_features, in_features): the module's own handle, so holding a copy of it
  /// would keep an optimizer from updating it in place. Never throws.
  const DeviceArray<float>& weight() const { return parameter(weight_); }
  /// The bias, (out_features). Throws InvalidArgument for a layer made without one.
  const DeviceArray<float>& bias() const {
    if (!bias_) ferry::detail::fail<InvalidArgument>("Linear", "this layer has no bias");
    return parameter(*bias_);
  }

 protected:
  /// Throws ShapeError naming Linear and both shapes unless x is (..., in_features).
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    const Shape s = x.shape();
    // The last size as a SymInt (dims() would pin the batch size of a traced input).
    if (s.rank() == 0 || s[s.rank() - 1] != in_) {
      ferry::detail::fail<ShapeError>("Linear", "input ", s, " does not end in in_features ", in_,
                                      " (weight ", weight().shape(), ")");
    }
    DeviceArray<float> y = matmul(x, transpose(weight()));
    if (!bias_) return y;
    return std::move(y) + bias();
  }

 private:
  std::int64_t in_;
  std::int64_t out_;
  std::size_t weight_ = 0;
  std::optional<std::size_t> bias_;
};

}  // namespace ferry::nn
