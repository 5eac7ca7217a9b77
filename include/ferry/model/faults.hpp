#pragma once
// FaultPlan and Fallback: the failures a modeled device injects, and what it does with a step it
// cannot run. Faults are verdicts of the model, like running out of memory: kernels still compute
// on the host's threads, and the model decides, from the seed and the step's submission index
// alone, which steps the device would have failed. So the same program on the same spec fails
// the same steps on every run, whatever the threads do.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry {

/// Failures a modeled device injects. Rates are probabilities per step, drawn from `seed` and
/// the step's submission index (0 for a device's first step); `fail_steps` lists submission
/// indices that fail whatever the rates. Host-to-device copies are imports, device-to-host
/// copies are exports' reads, kernels are every compute step. Copies between devices and views
/// fail only when listed.
struct FaultPlan {
  std::uint64_t seed = 0;
  double h2d_failure_rate = 0;
  double d2h_failure_rate = 0;
  double kernel_failure_rate = 0;
  std::vector<std::uint64_t> fail_steps = {};
};

/// What a device does with a step it rejects (an injected fault, or memory it can never get).
enum class Fallback : std::uint8_t {
  /// The step fails: its exports, and those of everything that depends on it, throw
  /// DeviceFault (or OutOfDeviceMemory). Independent work completes.
  none,
  /// The step runs on the host's CPU instead, with the same values; only its timing changes
  /// (see DeviceStats::fallbacks and the trace's "fallback" track).
  host,
};

namespace detail {

/// Throws InvalidArgument (from `op`) for a rate that is not a probability.
inline void validate(const FaultPlan& plan, std::string_view op, const std::string& spec_name) {
  const auto probability = [&](double v, const char* field) {
    if (!(v >= 0 && v <= 1)) {
      fail<InvalidArgument>(op, "spec '", spec_name, "': faults.", field,
                            " must be a probability in [0, 1], got ", v);
    }
  };
  probability(plan.h2d_failure_rate, "h2d_failure_rate");
  probability(plan.d2h_failure_rate, "d2h_failure_rate");
  probability(plan.kernel_failure_rate, "kernel_failure_rate");
}

/// A well-mixed 64-bit hash (splitmix64's finalizer): neighbouring step indices draw
/// independent-looking numbers.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Decides which steps a FaultPlan fails.
class FaultInjector {
 public:
  explicit FaultInjector(FaultPlan plan) : plan_(std::move(plan)) {
    // Looked up once per step: a binary search.
    std::sort(plan_.fail_steps.begin(), plan_.fail_steps.end());
    active_ = !plan_.fail_steps.empty() || plan_.h2d_failure_rate > 0 ||
              plan_.d2h_failure_rate > 0 || plan_.kernel_failure_rate > 0;
  }

  /// Whether the plan can fail anything at all (asked at every submission: kept, not derived).
  bool active() const noexcept { return active_; }

  /// Why the plan fails the step submitted as number `id`, of `kind`; empty if it does not.
  std::string fault(std::uint64_t id, StepKind kind) const {
    if (std::binary_search(plan_.fail_steps.begin(), plan_.fail_steps.end(), id)) {
      return "injected fault: step " + std::to_string(id) + " is in fail_steps";
    }
    double rate = 0;
    std::string_view what;
    switch (kind) {
      case StepKind::copy_in:
        rate = plan_.h2d_failure_rate;
        what = "host-to-device copy";
        break;
      case StepKind::copy_out:
        rate = plan_.d2h_failure_rate;
        what = "device-to-host copy";
        break;
      case StepKind::compute:
        rate = plan_.kernel_failure_rate;
        what = "kernel";
        break;
      case StepKind::copy_d2d:
      case StepKind::view:
        return {};
    }
    if (rate == 0) return {};
    // The top 53 bits as a uniform number in [0, 1).
    const double draw = static_cast<double>(mix(plan_.seed ^ mix(id)) >> 11) * 0x1.0p-53;
    if (draw >= rate) return {};
    std::string cause = "injected ";
    cause += what;
    cause += " fault (seed ";
    append_part(cause, plan_.seed);
    cause += ", rate ";
    append_part(cause, rate);
    cause += ')';
    return cause;
  }

 private:
  FaultPlan plan_;  // fail_steps sorted
  bool active_ = false;
};

}  // namespace detail
}  // namespace ferry
