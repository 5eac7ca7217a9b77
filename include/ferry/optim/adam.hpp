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
#include "ferry/optim/schedule.hpp"

namespace ferry::optim {

/// Adam's settings, defaulting to PyTorch's.
struct AdamOptions {
  /// A number or a schedule of the step count (see LearningRate).
  LearningRate lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  /// L2 penalty: weight_decay * p is added to the gradient.
  double weight_decay = 0;
};

/// AdamW's settings, defaulting to PyTorch's.
struct AdamWOptions {
  /// A number or a schedule of the step count (see LearningRate).
  LearningRate lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  /// Decoupled: p <- p * (1 - lr * weight_decay) before the Adam update.
  double weight_decay = 1e-2;
};

namespace detail {

/// The update Adam and AdamW share; `decoupled` says where the weight decay goes.
class AdamBase : public Optimizer {
 public:
  /// The settings. Never throws.
  const std::array<double, 2>& betas() const noexcept { return betas_; }
  double eps() const noexcept { return eps_; }
  double weight_decay() const noexcept { return decay_; }

 protected:
  AdamBase(std::string name, LearningRate lr, std::array<double, 2> betas, double eps,
           double weight_decay, bool decoupled)
      : Optimizer(std::move(name), std::move(lr), {"exp_avg", "exp_avg_sq"}), betas_(betas),
        eps_(eps), decay_(weight_decay), decoupled_(decoupled) {
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
  // The numbers of step t: lr / (1 - beta1^t), sqrt(1 - beta2^t) and 1 - lr * wd.
  void step_numbers(double lr, std::vector<double>& out) const override {
    const double t = static_cast<double>(steps() + 1);
    out.push_back(lr / (1 - std::pow(betas_[0], t)));
    out.push_back(std::sqrt(1 - std::pow(betas_[1], t)));
    out.push_back(1 - lr * decay_);
  }

  void update(std::span<DeviceArray<float>* const> params,
              std::span<const DeviceArray<float>* const> grads, bool first,
              std::span<const SymFloat> numbers) override {
    const SymFloat& step_size = numbers[0];
    const SymFloat& root2 = numbers[1];
    const SymFloat& kept = numbers[2];
    const auto beta1 = static_cast<float>(betas_[0]);
    const auto beta2 = static_cast<float>(betas_[1]);
    const auto eps = static_cast<float>(eps_);
    for (std::size_t i = 0; i < params.size(); ++i) {
      DeviceArray<float>& p = *params[i];
      DeviceArray<float>& m = state_of(0)[i];
      DeviceArray<float>& v = state_of(1)[i];
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
          p = std::move(p) * kept;
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
  std::array<double, 2> betas_;
  double eps_;
  double decay_;
  bool decoupled_;
};

}  // namespace detail

/// Adam (Kingma and Ba) as PyTorch implements it, weight decay added to the gradient. The
/// moments (the state's "exp_avg" and "exp_avg_sq", PyTorch's names) live on the parameters'
/// devices and are overwritten in place.
class Adam : public detail::AdamBase {
 public:
  /// Throws InvalidArgument naming Adam and the value for a negative or non-finite lr (a
  /// number; a schedule's values are checked at each step), eps or weight_decay, or a beta
  /// outside [0, 1).
  explicit Adam(AdamOptions options = {})
      : AdamBase("Adam", std::move(options.lr), options.betas, options.eps, options.weight_decay,
                 false) {}
  /// The settings now (set_lr changes lr). Never throws but std::bad_alloc.
  AdamOptions options() const { return {learning_rate(), betas(), eps(), weight_decay()}; }
};

/// AdamW (Loshchilov and Hutter) as PyTorch implements it: weight decay applied to the
/// weights apart from the gradient. The moments ("exp_avg", "exp_avg_sq") live on the
/// parameters' devices and are overwritten in place.
class AdamW : public detail::AdamBase {
 public:
  /// Throws InvalidArgument naming AdamW and the value, like Adam.
  explicit AdamW(AdamWOptions options = {})
      : AdamBase("AdamW", std::move(options.lr), options.betas, options.eps, options.weight_decay,
                 true) {}
  /// The settings now (set_lr changes lr). Never throws but std::bad_alloc.
  AdamWOptions options() const { return {learning_rate(), betas(), eps(), weight_decay()}; }
};

}  // namespace ferry::optim
