#pragma once
// optim::Adam and optim::AdamW: Adam with PyTorch's options and update rule, its weight decay
// added to the gradient (Adam) or applied to the weights apart from it (AdamW).

#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/unary.hpp"
#include "ferry/optim/optimizer.hpp"

namespace ferry::optim {

/// Adam's settings, defaulting to PyTorch's.
struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  /// L2 penalty: weight_decay * p is added to the gradient.
  double weight_decay = 0;
};

/// AdamW's settings, defaulting to PyTorch's.
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  /// Decoupled: p <- p * (1 - lr * weight_decay) before the Adam update.
  double weight_decay = 1e-2;
};

namespace detail {

/// The update Adam and AdamW share; `decoupled` says where the weight decay goes.
class AdamBase : public Optimizer {
 public:
  /// The learning rate of the next steps. Never throws, nor do the other settings below.
  double lr() const noexcept { return lr_; }
  const std::array<double, 2>& betas() const noexcept { return betas_; }
  double eps() const noexcept { return eps_; }
  double weight_decay() const noexcept { return decay_; }

  /// "i.exp_avg" then "i.exp_avg_sq" for each parameter. See Optimizer::state.
  nn::NamedParameters state() const override {
    nn::NamedParameters out;
    for (std::size_t i = 0; i < exp_avg_.size(); ++i) {
      out.emplace_back(std::to_string(i) + ".exp_avg", exp_avg_[i]);
      out.emplace_back(std::to_string(i) + ".exp_avg_sq", exp_avg_sq_[i]);
    }
    return out;
  }
  /// Sets the learning rate of the next steps (for a schedule). Throws InvalidArgument naming
  /// the optimizer for a negative or non-finite value.
  void set_lr(double lr) {
    require_non_negative("lr", lr);
    lr_ = lr;
  }

 protected:
  AdamBase(std::string name, double lr, std::array<double, 2> betas, double eps,
           double weight_decay, bool decoupled)
      : Optimizer(std::move(name)), lr_(lr), betas_(betas), eps_(eps), decay_(weight_decay),
        decoupled_(decoupled) {
    require_non_negative("lr", lr);
    require_non_negative("eps", eps);
    require_non_negative("weight_decay", weight_decay);
    for (std::size_t k = 0; k < 2; ++k) {
      if (!(betas[k] >= 0 && betas[k] < 1)) {
        ferry::detail::fail<InvalidArgument>(this->name(), "invalid beta", k + 1, " ", betas[k],
                                             ": it must be in [0, 1)");
      }
    }
  }

  // p <- p * (1 - lr * wd) (AdamW) or g <- g + wd * p (Adam); then, at step t,
  // m <- beta1 m + (1 - beta1) g,  v <- beta2 v + (1 - beta2) g^2,
  // p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
  void update(std::span<DeviceArray<float>* const> params,
              std::span<const DeviceArray<float>* const> grads, bool first) override {
    const double t = static_cast<double>(steps() + 1);
    const double correction1 = 1 - std::pow(betas_[0], t);
    const double correction2 = 1 - std::pow(betas_[1], t);
    const auto beta1 = static_cast<float>(betas_[0]);
    const auto beta2 = static_cast<float>(betas_[1]);
    const auto step_size = static_cast<float>(lr_ / correction1);
    const auto root2 = static_cast<float>(std::sqrt(correction2));
    const auto eps = static_cast<float>(eps_);
    if (first) {
      exp_avg_.resize(params.size());
      exp_avg_sq_.resize(params.size());
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      DeviceArray<float>& p = *params[i];
      DeviceArray<float>& m = exp_avg_[i];
      DeviceArray<float>& v = exp_avg_sq_[i];
      if (first) {
        m = zeros<float>(p.device(), p.shape());
        v = zeros<float>(p.device(), p.shape());
      } else {
        follow(m, p);
        follow(v, p);
      }
      DeviceArray<float> g = *grads[i];
      if (decay_ != 0) {
        if (decoupled_) {
          p = std::move(p) * static_cast<float>(1 - lr_ * decay_);
        } else {
          g = std::move(g) + p * static_cast<float>(decay_);
        }
      }
      m = std::move(m) * beta1 + g * static_cast<float>(1 - betas_[0]);
      v = std::move(v) * beta2 + (g * g) * static_cast<float>(1 - betas_[1]);
      DeviceArray<float> denom = sqrt(v) / root2 + eps;
      p = std::move(p) - (m / std::move(denom)) * step_size;
    }
  }

 private:
  double lr_;
  std::array<double, 2> betas_;
  double eps_;
  double decay_;
  bool decoupled_;
  std::vector<DeviceArray<float>> exp_avg_;
  std::vector<DeviceArray<float>> exp_avg_sq_;
};

}  // namespace detail

/// Adam (Kingma and Ba) as PyTorch implements it, weight decay added to the gradient. The
/// moments live on the parameters' devices and are overwritten in place.
class Adam : public detail::AdamBase {
 public:
  /// Throws InvalidArgument naming Adam and the value for a negative or non-finite lr, eps or
  /// weight_decay, or a beta outside [0, 1).
  explicit Adam(AdamOptions options = {})
      : AdamBase("Adam", options.lr, options.betas, options.eps, options.weight_decay, false) {}
  /// The settings now (set_lr changes lr). Never throws.
  AdamOptions options() const { return {lr(), betas(), eps(), weight_decay()}; }
};

/// AdamW (Loshchilov and Hutter) as PyTorch implements it: weight decay applied to the
/// weights apart from the gradient. The moments live on the parameters' devices and are
/// overwritten in place.
class AdamW : public detail::AdamBase {
 public:
  /// Throws InvalidArgument naming AdamW and the value, like Adam.
  explicit AdamW(AdamWOptions options = {})
      : AdamBase("AdamW", options.lr, options.betas, options.eps, options.weight_decay, true) {}
  /// The settings now (set_lr changes lr). Never throws.
  AdamWOptions options() const { return {lr(), betas(), eps(), weight_decay()}; }
};

}  // namespace ferry::optim
