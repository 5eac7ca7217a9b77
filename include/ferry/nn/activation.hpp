#pragma once
// Activation functions as modules, so they can sit in a Sequential. They hold no parameters,
// so they take an input on any device.

#include <string_view>

#include "ferry/array.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/unary.hpp"

namespace ferry::nn {

/// max(x, 0) elementwise. Throws InvalidArgument for an empty input.
class ReLU : public Module {
 public:
  std::string_view type_name() const override { return "ReLU"; }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x) const override { return relu(x); }
};

/// tanh(x) elementwise. Throws InvalidArgument for an empty input.
class Tanh : public Module {
 public:
  std::string_view type_name() const override { return "Tanh"; }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x) const override { return tanh(x); }
};

/// 1 / (1 + e^-x) elementwise. Throws InvalidArgument for an empty input.
class Sigmoid : public Module {
 public:
  std::string_view type_name() const override { return "Sigmoid"; }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x) const override { return sigmoid(x); }
};

/// The exact GELU, x/2 * (1 + erf(x / sqrt 2)), PyTorch's default. Throws InvalidArgument for
/// an empty input.
class GELU : public Module {
 public:
  std::string_view type_name() const override { return "GELU"; }

 protected:
  DeviceArray<float> forward(const DeviceArray<float>& x) const override { return gelu(x); }
};

}  // namespace ferry::nn
