#pragma once
// nn::Conv2d: the conv2d op with a learned kernel and bias, laid out, named and initialized as
// PyTorch's nn.Conv2d ("weight" (out, in / groups, kh, kw), "bias" (out)), so a PyTorch
// checkpoint loads without reshaping.

#include <array>
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
#include "ferry/ops/axes.hpp"
#include "ferry/ops/convolution.hpp"
#include "ferry/transfer.hpp"

namespace ferry::nn {

/// How a Conv2d is made besides its channels, kernel size and device (PyTorch's defaults;
/// padding is zeros, the only padding_mode offered).
struct Conv2dOptions {
  /// (height, width) each.
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  /// Channels split into this many independent groups (in and out must divide by it).
  std::int64_t groups = 1;
  /// Whether the output gets a per-channel "bias".
  bool bias = true;
  /// The seed of the initial values; without one, nn::next_seed() picks it.
  std::optional<std::uint64_t> seed{};
};

/// A 2-D convolution (cross-correlation, as PyTorch's): x (N, in, H, W) or unbatched (in, H,
/// W) to (N, out, OH, OW) or (out, OH, OW). Parameters "weight" (out, in / groups, kh, kw) and,
/// with a bias, "bias" (out), both uniform in +-1/sqrt(fan_in), fan_in = in / groups * kh * kw:
/// PyTorch's reset_parameters (kaiming_uniform_ with a = sqrt(5) reduces to that bound), weight
/// first, then bias, from one stream.
class Conv2d : public Module {
 public:
  /// A layer on `device` (the host CPU device unless given), kernel (kh, kw). Throws
  /// InvalidArgument naming Conv2d for a negative channel count, a kernel size, stride or
  /// dilation below 1, a negative padding, groups below 1 or not dividing both channel counts;
  /// and what to_device throws.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels,
         std::array<std::int64_t, 2> kernel_size, const Device& device = Device::cpu(),
         Conv2dOptions options = {})
      : in_(in_channels),
        out_(out_channels),
        kernel_(kernel_size),
        conv_{options.stride, options.padding, options.dilation, options.groups} {
    check(options);
    const std::int64_t fan_in = in_channels / options.groups * kernel_size[0] * kernel_size[1];
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    detail::SplitMix64 gen(options.seed ? *options.seed : next_seed());
    const Shape ws{out_channels, in_channels / options.groups, kernel_size[0], kernel_size[1]};
    std::vector<float> w;
    detail::append_uniform(w, static_cast<std::size_t>(ws.numel()), -bound, bound, gen);
    weight_ = register_parameter("weight", to_device(device, std::move(w), ws));
    if (options.bias) {
      std::vector<float> b;
      detail::append_uniform(b, static_cast<std::size_t>(out_channels), -bound, bound, gen);
      bias_ = register_parameter("bias", to_device(device, std::move(b), Shape{out_channels}));
    }
  }

  /// A square kernel (k, k); throws like the other constructor.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         const Device& device = Device::cpu(), Conv2dOptions options = {})
      : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, device, options) {}

  std::string_view type_name() const override { return "Conv2d"; }

  /// The sizes and the window; never throw.
  std::int64_t in_channels() const noexcept { return in_; }
  std::int64_t out_channels() const noexcept { return out_; }
  std::array<std::int64_t, 2> kernel_size() const noexcept { return kernel_; }
  const ferry::Conv2dOptions& window() const noexcept { return conv_; }
  bool has_bias() const noexcept { return bias_.has_value(); }

  /// The kernel, (out, in / groups, kh, kw): the module's own handle. Never throws.
  const DeviceArray<float>& weight() const { return parameter(weight_); }
  /// The bias, (out). Throws InvalidArgument for a layer made without one.
  const DeviceArray<float>& bias() const {
    if (!bias_) ferry::detail::fail<InvalidArgument>("Conv2d", "this layer has no bias");
    return parameter(*bias_);
  }

 protected:
  /// Throws ShapeError naming Conv2d unless x is (N, in, H, W) or (in, H, W), and what conv2d
  /// throws for a window larger than the padded image.
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    const Shape s = x.shape();
    if ((s.rank() != 3 && s.rank() != 4) || s[s.rank() - 3] != in_) {
      ferry::detail::fail<ShapeError>("Conv2d", "input ", s, " is not (N, ", in_, ", H, W) or (",
                                      in_, ", H, W) (weight ", weight().shape(), ")");
    }
    const DeviceArray<float> bias = bias_ ? parameter(*bias_) : DeviceArray<float>{};
    if (s.rank() == 3) return squeeze(conv2d(unsqueeze(x, 0), weight(), bias, conv_), 0);
    return conv2d(x, weight(), bias, conv_);
  }

 private:
  void check(const Conv2dOptions& o) const {
    auto bad = [](const char* what, auto... values) {
      ferry::detail::fail<InvalidArgument>("Conv2d", what, values...);
    };
    if (in_ < 0 || out_ < 0) bad("channel counts must not be negative, got ", in_, " and ", out_);
    if (kernel_[0] < 1 || kernel_[1] < 1)
      bad("kernel_size must be >= 1, got ", kernel_[0], " x ", kernel_[1]);
    for (std::size_t d = 0; d < 2; ++d) {
      if (o.stride[d] < 1) bad("stride must be >= 1, got ", o.stride[0], " x ", o.stride[1]);
      if (o.dilation[d] < 1)
        bad("dilation must be >= 1, got ", o.dilation[0], " x ", o.dilation[1]);
      if (o.padding[d] < 0) bad("padding must be >= 0, got ", o.padding[0], " x ", o.padding[1]);
    }
    if (o.groups < 1 || in_ % o.groups != 0 || out_ % o.groups != 0) {
      bad("groups must be >= 1 and divide in_channels ", in_, " and out_channels ", out_, ", got ",
          o.groups);
    }
  }

  std::int64_t in_;
  std::int64_t out_;
  std::array<std::int64_t, 2> kernel_;
  ferry::Conv2dOptions conv_;
  std::size_t weight_ = 0;
  std::optional<std::size_t> bias_;
};

}  // namespace ferry::nn
