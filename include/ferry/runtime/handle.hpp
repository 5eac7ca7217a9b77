#pragma once
// Handle: the reference a DeviceArray holds. Unlike the graph's internal references, handles are
// counted per step and per device, because "the user can no longer name this" is an event the
// runtime acts on (a stepped executor runs what nobody can drive any more).

#include <utility>

#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(Ref<Step> step) noexcept : step_(std::move(step)) { acquire(); }
  Handle(const Handle& o) noexcept : step_(o.step_) { acquire(); }
  Handle(Handle&& o) noexcept : step_(std::move(o.step_)) {}
  Handle& operator=(Handle o) noexcept {
    std::swap(step_, o.step_);
    return *this;
  }
  ~Handle() {
    if (step_ && step_->drop_handle()) step_->device()->handles_gone(*step_);
  }

  Step* get() const noexcept { return step_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(step_); }

 private:
  void acquire() noexcept {
    if (step_ && step_->add_handle()) step_->device()->add_user();
  }

  Ref<Step> step_;
};

}  // namespace ferry::detail
