#pragma once
// optim::LearningRate and the schedules: a learning rate is a number or a function of the step
// count that the optimizer holds and evaluates on the host before each step. A schedule is then
// part of the optimizer's settings, not a second object to step beside it (PyTorch's
// lr_scheduler), so it cannot drift from the optimizer's step count, and a resumed run (see
// Optimizer::load_state_dict) picks it up at the restored step.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <numbers>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ferry/core/error.hpp"

namespace ferry::optim {

/// A learning rate: a number (`{.lr = 1e-3}`) or a schedule, a callable that takes the number
/// of steps taken before a step and returns that step's rate (`{.lr = optim::cosine_decay(1e-3,
/// 1000, 0)}`, or any `double(std::int64_t)` callable). Cheap to copy unless the callable is.
class LearningRate {
 public:
  /// A constant rate. Implicit, so a plain number goes wherever a LearningRate is wanted. Never
  /// throws: the optimizer checks the value (finite and not negative).
  LearningRate(double value) noexcept : value_(value) {}  // NOLINT: implicit on purpose

  /// A schedule: `schedule(t)` is the rate of the step taken after t steps (t = 0 for the
  /// first step). It is called on the host at each step, with the optimizer's step count, and
  /// must return a finite rate that is not negative (the optimizer throws InvalidArgument at the
  /// step otherwise). Implicit, like the number. Throws what copying the callable throws.
  template <class F>
    requires(!std::same_as<std::remove_cvref_t<F>, LearningRate>) &&
            (!std::convertible_to<F, double>) &&
            std::invocable<const std::decay_t<F>&, std::int64_t> &&
            std::convertible_to<std::invoke_result_t<const std::decay_t<F>&, std::int64_t>, double>
  LearningRate(F&& schedule)  // NOLINT: implicit on purpose
      : schedule_(std::forward<F>(schedule)) {}

  /// The rate of the step taken after `step` steps. Throws what the schedule throws (a constant
  /// never throws).
  double operator()(std::int64_t step) const {
    return schedule_ ? static_cast<double>(schedule_(step)) : value_;
  }

  /// True for a schedule, false for a constant. Never throws.
  bool is_schedule() const noexcept { return static_cast<bool>(schedule_); }

  /// The rate of the first step: the number itself for a constant, so code that reads an
  /// options struct's `lr` as a number keeps working. Throws what the schedule throws.
  operator double() const { return (*this)(0); }  // NOLINT: implicit on purpose

 private:
  double value_ = 0;
  std::function<double(std::int64_t)> schedule_;  // empty for a constant
};

namespace detail {

/// Throws InvalidArgument naming `op` unless `value` is finite and not negative.
inline void require_rate(std::string_view op, const char* what, double value) {
  if (!(value >= 0) || !std::isfinite(value)) {
    ferry::detail::fail<InvalidArgument>(op, "invalid ", what, " ", value,
                                         ": it must be finite and not negative");
  }
}

}  // namespace detail

/// PyTorch's StepLR: `lr * gamma^floor(t / step_size)` at step t (its closed form, so the rate
/// does not depend on how it was reached). A step below 0 counts as 0. Throws InvalidArgument
/// naming optim::step_decay for a negative or non-finite lr or gamma, or a step_size below 1.
inline LearningRate step_decay(double lr, std::int64_t step_size, double gamma) {
  constexpr std::string_view op = "optim::step_decay";
  detail::require_rate(op, "lr", lr);
  detail::require_rate(op, "gamma", gamma);
  if (step_size < 1) {
    ferry::detail::fail<InvalidArgument>(op, "invalid step_size ", step_size,
                                         ": it must be at least 1");
  }
  return [lr, step_size, gamma](std::int64_t t) {
    return lr * std::pow(gamma, static_cast<double>(std::max<std::int64_t>(t, 0) / step_size));
  };
}

/// PyTorch's CosineAnnealingLR over `steps` steps, from `lr` at step 0 down to `final_lr` at
/// step `steps`: `final_lr + (lr - final_lr) * (1 + cos(pi * t / steps)) / 2`. After `steps` it
/// stays at `final_lr` (PyTorch's closed form would climb again: a schedule that ends is what
/// a run of known length wants). A step below 0 counts as 0. Throws InvalidArgument naming
/// optim::cosine_decay for a negative or non-finite lr or final_lr, or steps below 1.
inline LearningRate cosine_decay(double lr, std::int64_t steps, double final_lr) {
  constexpr std::string_view op = "optim::cosine_decay";
  detail::require_rate(op, "lr", lr);
  detail::require_rate(op, "final_lr", final_lr);
  if (steps < 1) {
    ferry::detail::fail<InvalidArgument>(op, "invalid steps ", steps, ": it must be at least 1");
  }
  return [lr, steps, final_lr](std::int64_t t) {
    if (t >= steps) return final_lr;
    const double progress =
        static_cast<double>(std::max<std::int64_t>(t, 0)) / static_cast<double>(steps);
    return final_lr + (lr - final_lr) * (1 + std::cos(std::numbers::pi * progress)) / 2;
  };
}

/// `schedule` after a linear warmup of `steps` steps: step t < steps takes (t + 1) / steps of
/// the schedule's first rate (so the first step already moves, and step steps - 1 takes the
/// whole of it); from step `steps` on, the schedule runs as if started there (step t takes
/// schedule(t - steps), as PyTorch's SequentialLR hands over). `schedule` may be a number. No
/// warmup with steps 0. Throws InvalidArgument naming optim::linear_warmup for steps below 0.
inline LearningRate linear_warmup(std::int64_t steps, LearningRate schedule) {
  if (steps < 0) {
    ferry::detail::fail<InvalidArgument>("optim::linear_warmup", "invalid steps ", steps,
                                         ": it must not be negative");
  }
  return [steps, schedule = std::move(schedule)](std::int64_t t) {
    if (t >= steps) return schedule(t - steps);
    const double share =
        static_cast<double>(std::max<std::int64_t>(t, 0) + 1) / static_cast<double>(steps);
    return schedule(0) * share;
  };
}

}  // namespace ferry::optim
