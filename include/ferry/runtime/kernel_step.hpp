#pragma once
// KernelStep: the step every op makes, its kernel a callable stored in the step itself (no
// std::function, no second allocation).

#include <memory>
#include <span>
#include <utility>

#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// A step whose kernel is the callable `Kernel`, called as `kernel(step)`.
template <class Kernel>
class KernelStep final : public Step {
 public:
  KernelStep(std::shared_ptr<DeviceState> device, ExecutorBase& executor, StepInfo&& info,
             DType dtype, const Shape& shape, std::span<Step* const> inputs, Kernel kernel)
      : Step(std::move(device), executor, std::move(info), dtype, shape, inputs),
        kernel_(std::move(kernel)) {}

 private:
  void execute() override { kernel_(static_cast<const Step&>(*this)); }
  Kernel kernel_;
};

}  // namespace ferry::detail
