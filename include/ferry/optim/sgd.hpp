#pragma once
// optim::SGD: stochastic gradient descent with PyTorch's options and update rule.

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/optim/optimizer.hpp"

namespace ferry::optim {

/// SGD's settings, defaulting to PyTorch's.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  /// L2 penalty: weight_decay * p is added to the gradient.
  double weight_decay = 0;
  bool nesterov = false;
};

/// For each parameter p with gradient g (PyTorch's rule):
///   g <- g + weight_decay * p
///   with momentum: b <- g at the first step, else b <- momentum * b + (1 - dampening) * g;
///                  then g <- g + momentum * b with nesterov, else g <- b
///   p <- p - lr * g
/// The momentum buffers live on the parameters' devices and are overwritten in place.
class SGD : public Optimizer {
 public:
  /// Throws InvalidArgument naming SGD and the value for a negative or non-finite lr,
  /// momentum, dampening or weight_decay, and for nesterov without momentum or with dampening.
  explicit SGD(SGDOptions options = {}) : Optimizer("SGD"), options_(options) {
    require_non_negative("lr", options.lr);
    require_non_negative("momentum", options.momentum);
    require_non_negative("dampening", options.dampening);
    require_non_negative("weight_decay", options.weight_decay);
    if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
      ferry::detail::fail<InvalidArgument>("SGD", "nesterov needs a positive momentum and zero "
                                                  "dampening, got momentum ", options.momentum,
                                           " and dampening ", options.dampening);
    }
  }

  /// The settings now (set_lr changes lr). Never throws.
  const SGDOptions& options() const noexcept { return options_; }
  /// The learning rate of the next steps. Never throws.
  double lr() const noexcept { return options_.lr; }

  /// "i.momentum_buffer" for each parameter, with momentum only. See Optimizer::state.
  nn::NamedParameters state() const override {
    nn::NamedParameters out;
    for (std::size_t i = 0; i < momentum_.size(); ++i) {
      out.emplace_back(std::to_string(i) + ".momentum_buffer", momentum_[i]);
    }
    return out;
  }
  /// Sets the learning rate of the next steps (for a schedule). Throws InvalidArgument like
  /// the constructor.
  void set_lr(double lr) {
    require_non_negative("lr", lr);
    options_.lr = lr;
  }

 protected:
  void update(std::span<DeviceArray<float>* const> params,
              std::span<const DeviceArray<float>* const> grads, bool first) override {
    const SGDOptions& o = options_;
    const auto lr = static_cast<float>(o.lr);
    const auto momentum = static_cast<float>(o.momentum);
    const auto kept = static_cast<float>(1 - o.dampening);
    const auto decay = static_cast<float>(o.weight_decay);
    if (first && o.momentum != 0) momentum_.resize(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      DeviceArray<float>& p = *params[i];
      DeviceArray<float> g = o.weight_decay != 0 ? *grads[i] + p * decay : *grads[i];
      if (o.momentum != 0) {
        DeviceArray<float>& b = momentum_[i];
        if (first) {
          // A buffer of the optimizer's own (not the caller's gradient), so later steps can
          // overwrite it.
          b = zeros<float>(p.device(), p.shape()) + g;
        } else {
          follow(b, p);
          b = o.dampening == 0 ? std::move(b) * momentum + g : std::move(b) * momentum + g * kept;
        }
        g = o.nesterov ? std::move(g) + b * momentum : b;
      }
      p = std::move(p) - std::move(g) * lr;
    }
  }

 private:
  SGDOptions options_;
  std::vector<DeviceArray<float>> momentum_;
};

}  // namespace ferry::optim
