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
#include "ferry/optim/schedule.hpp"

namespace ferry::optim {

/// SGD's settings, defaulting to PyTorch's.
struct SGDOptions {
  /// A number or a schedule of the step count (see LearningRate).
  LearningRate lr = 1e-3;
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
/// The momentum buffers (the state's "momentum_buffer", with momentum only) live on the
/// parameters' devices and are overwritten in place.
class SGD : public Optimizer {
 public:
  /// Throws InvalidArgument naming SGD and the value for a negative or non-finite lr (a
  /// number; a schedule's values are checked at each step), momentum, dampening or
  /// weight_decay, and for nesterov without momentum or with dampening.
  explicit SGD(SGDOptions options = {})
      : Optimizer("SGD", options.lr,
                  options.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                        : std::vector<std::string>{}),
        options_(std::move(options)) {
    options_.lr = 0.0;  // unused: the base holds the rate, which set_lr may change
    require_non_negative("momentum", options_.momentum);
    require_non_negative("dampening", options_.dampening);
    require_non_negative("weight_decay", options_.weight_decay);
    if (options_.nesterov && (options_.momentum <= 0 || options_.dampening != 0)) {
      ferry::detail::fail<InvalidArgument>("SGD", "nesterov needs a positive momentum and zero "
                                                  "dampening, got momentum ", options_.momentum,
                                           " and dampening ", options_.dampening);
    }
  }

  /// The settings now (set_lr changes lr). Never throws but std::bad_alloc.
  SGDOptions options() const {
    SGDOptions o = options_;
    o.lr = learning_rate();
    return o;
  }

 protected:
  void update(std::span<DeviceArray<float>* const> params,
              std::span<const DeviceArray<float>* const> grads, bool first,
              std::span<const SymFloat> numbers) override {
    const SGDOptions& o = options_;
    const SymFloat& lr = numbers[0];
    const auto momentum = static_cast<float>(o.momentum);
    const auto kept = static_cast<float>(1 - o.dampening);
    const auto decay = static_cast<float>(o.weight_decay);
    for (std::size_t i = 0; i < params.size(); ++i) {
      DeviceArray<float>& p = *params[i];
      DeviceArray<float> g = o.weight_decay != 0 ? *grads[i] + p * decay : *grads[i];
      if (o.momentum != 0) {
        DeviceArray<float>& b = state_of(0)[i];
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
  SGDOptions options_;  // but lr, which learning_rate() holds
};

}  // namespace ferry::optim
