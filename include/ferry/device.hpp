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
      : Device(std::move(executor), std::make_unique<detail::StepTally>(), next_name()) {}

  /// The host CPU as a device: one per process, on Executor::shared().
  static Device cpu() {
    static const Device host(Executor::shared(), std::make_unique<detail::StepTally>(), "cpu");
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

  Device(const Device& o) noexcept : state_(o.state_) { state_->add_user(); }
  Device(Device&& o) noexcept : Device(o) {}  // a moved-from Device still names its device
  Device& operator=(const Device& o) noexcept {
    Device copy(o);
    std::swap(state_, copy.state_);
    return *this;
  }
  ~Device() { state_->drop_user(); }

 private:
  friend struct detail::DeviceAccess;
  explicit Device(std::shared_ptr<detail::DeviceState> state) : state_(std::move(state)) {
    state_->add_user();
  }
  Device(Executor executor, std::unique_ptr<detail::StepObserver> model, std::string name)
      : Device(std::make_shared<detail::DeviceState>(std::move(name), std::move(executor.impl_),
                                                     std::move(model))) {}

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
  /// A device whose steps `model` observes: the seam every device model plugs into.
  static Device make(Executor executor, std::unique_ptr<StepObserver> model, std::string name) {
    return Device(std::move(executor), std::move(model), std::move(name));
  }
};

}  // namespace detail
}  // namespace ferry
