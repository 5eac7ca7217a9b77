#pragma once
// nn::Dropout: PyTorch's nn.Dropout with ferry's explicit random keys. PyTorch draws the mask
// from a hidden global generator; here the call takes a key, so a step is reproducible and,
// under jit, the key is an input a replay can change.

#include <string_view>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/nn/module.hpp"
#include "ferry/ops/random.hpp"

namespace ferry::nn {

/// Zeroes each element with probability p and scales the others by 1 / (1 - p) in training
/// mode (inverted dropout, so the expected value is kept); the identity in evaluation mode
/// (`eval()`). It holds no parameters, so it takes an input on any device.
class Dropout : public Module {
 public:
  /// Dropout with probability `p` (0.5 unless given, as PyTorch). Throws InvalidArgument naming
  /// Dropout unless 0 <= p <= 1.
  explicit Dropout(double p = 0.5) : p_(p) {
    if (!(p >= 0 && p <= 1))
      ferry::detail::fail<InvalidArgument>("Dropout", "needs 0 <= p <= 1, got ", p);
  }

  std::string_view type_name() const override { return "Dropout"; }

  /// The probability of zeroing an element. Never throws.
  double p() const noexcept { return p_; }

  using Module::operator();

  /// x with its mask drawn from `key` in training mode (random::dropout: element i depends only
  /// on i and the key), x itself in evaluation mode. Use a key once: split it for the next call.
  /// Throws, in either mode and before anything is submitted, InvalidArgument naming Dropout
  /// for an empty x or key, ShapeError for a key not of shape (2), DeviceMismatch for a key on
  /// another device than x.
  DeviceArray<float> operator()(const DeviceArray<float>& x, const random::Key& key) const {
    check_input(x);
    if (!key.valid()) ferry::detail::fail<InvalidArgument>("Dropout", "got an empty key");
    if (key.shape() != Shape{2})
      ferry::detail::fail<ShapeError>("Dropout", "needs a key of shape (2), got ", key.shape());
    if (key.device() != x.device()) {
      ferry::detail::fail<DeviceMismatch>("Dropout", "the key lives on ", key.device().name(),
                                          ", x on ", x.device().name());
    }
    if (!is_training()) return x;
    return random::dropout(key, x, p_);
  }

 protected:
  /// The call without a key (`dropout(x)`, or inside a Sequential): x in evaluation mode.
  /// Throws InvalidArgument naming Dropout in training mode, where a mask needs a key.
  DeviceArray<float> forward(const DeviceArray<float>& x) const override {
    if (is_training()) {
      ferry::detail::fail<InvalidArgument>(
          "Dropout",
          "needs a key in training mode: call it as dropout(x, key), "
          "or eval() it");
    }
    return x;
  }

 private:
  double p_;
};

}  // namespace ferry::nn
