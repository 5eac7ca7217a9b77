#pragma once
// ferry::Device: where arrays live and steps run. A handle; copies name the same device.

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "ferry/executor.hpp"
#include "ferry/model/step_tally.hpp"
#include "ferry/runtime/device_state.hpp"

namespace ferry {

namespace detail {
struct DeviceAccess;
}

/// A device: a modeled accelerator, or the host CPU. Arrays of two devices never meet in one
/// op (DeviceMismatch). A device stays alive while any handle, array or pending step uses it.
class Device {
 public:
  /// A new modeled accelerator whose kernels run on Executor::shared().
  Device() : Device(Executor::shared()) {}

  /// A new modeled accelerator whose kernels run on `executor`.
  explicit Device(Executor executor)
      : state_(std::make_shared<detail::DeviceState>(next_name(), executor.impl_,
                                                     std::make_unique<detail::StepTally>())) {}

  /// The host CPU as a device: one per process, on Executor::shared().
  static Device cpu() {
    static const Device host(std::make_shared<detail::DeviceState>(
        "cpu", Executor::shared().impl_, std::make_unique<detail::StepTally>()));
    return host;
  }

  /// "cpu", or "modeled:N" with N counting the modeled devices made by this process.
  const std::string& name() const noexcept { return state_->name(); }
  bool is_cpu() const { return *this == cpu(); }
  /// The executor whose threads run this device's kernels.
  Executor executor() const { return Executor(state_->executor_handle()); }

  friend bool operator==(const Device& a, const Device& b) noexcept {
    return a.state_ == b.state_;
  }

 private:
  friend struct detail::DeviceAccess;
  explicit Device(std::shared_ptr<detail::DeviceState> state) : state_(std::move(state)) {}

  static std::string next_name() {
    static std::atomic<std::size_t> count{0};
    return "modeled:" + std::to_string(count.fetch_add(1, std::memory_order_relaxed));
  }

  std::shared_ptr<detail::DeviceState> state_;
};

namespace detail {

/// The untyped state behind Device handles, for the layers below the public API.
struct DeviceAccess {
  static const std::shared_ptr<DeviceState>& state(const Device& d) noexcept { return d.state_; }
  static Device wrap(std::shared_ptr<DeviceState> s) noexcept { return Device(std::move(s)); }
};

}  // namespace detail
}  // namespace ferry
