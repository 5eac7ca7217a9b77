#pragma once
// custom: a step whose kernel and cost the user supplies, so users can model their own kernels
// and researchers can feed task graphs to the device model.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/device.hpp"

namespace ferry {

namespace detail {

/// Kernels that can be empty: a std::function or a function pointer (a lambda cannot).
template <class K>
inline constexpr bool kNullableKernel = std::is_pointer_v<K>;
template <class Signature>
inline constexpr bool kNullableKernel<std::function<Signature>> = true;

}  // namespace detail

/// What a custom kernel sees: its inputs' values and its output's storage, row-major.
template <Element T>
struct KernelArgs {
  std::vector<std::span<const T>> inputs;
  std::span<T> output;
};

/// A step named `name` on `device` that runs `kernel(KernelArgs<T>)` once `inputs` are computed
/// and writes an array of `out_shape`; the model charges it `cost` (a roofline of flops and
/// bytes, or Cost::fixed). An exception the kernel throws reaches the exports that depend on
/// it. Throws at the call: InvalidArgument for an empty name, an empty kernel (a
/// default-constructed std::function, a null function pointer), a negative or non-finite cost
/// (a fixed duration included) or an empty handle; DeviceMismatch for an input on another
/// device.
template <Element T, class Kernel>
  requires std::invocable<Kernel&, KernelArgs<T>>
DeviceArray<T> custom(const Device& device, std::string name,
                      const std::vector<DeviceArray<T>>& inputs, Shape out_shape, Kernel kernel,
                      Cost cost) {
  if (name.empty()) detail::fail<InvalidArgument>("custom", "needs a name");
  // Whatever can be empty (std::function, a function pointer) is refused now: calling it in
  // the kernel would throw std::bad_function_call (or crash) at an export far from here.
  if constexpr (detail::kNullableKernel<Kernel>) {
    if (!static_cast<bool>(kernel)) detail::fail<InvalidArgument>(name, "got an empty kernel");
  }
  if (cost.flops < 0 || cost.bytes_read < 0 || cost.bytes_written < 0) {
    detail::fail<InvalidArgument>(name, "negative cost: ", cost.flops, " flops, ",
                                  cost.bytes_read, " bytes read, ", cost.bytes_written,
                                  " bytes written");
  }
  // The model turns a cost into whole nanoseconds: NaN or infinity has no such value.
  if (!std::isfinite(cost.flops) || !std::isfinite(cost.bytes_read) ||
      !std::isfinite(cost.bytes_written)) {
    detail::fail<InvalidArgument>(name, "cost is not finite: ", cost.flops, " flops, ",
                                  cost.bytes_read, " bytes read, ", cost.bytes_written,
                                  " bytes written");
  }
  if (cost.fixed_duration && *cost.fixed_duration < Duration::zero()) {
    detail::fail<InvalidArgument>(name, "negative fixed duration of ",
                                  cost.fixed_duration->count(), " ns");
  }
  const auto& dev = detail::DeviceAccess::state(device);
  std::vector<detail::Step*> steps;
  steps.reserve(inputs.size());
  for (const DeviceArray<T>& a : inputs) {
    detail::Step& s = detail::step_of(name, a);
    if (s.device() != dev) {
      detail::fail<DeviceMismatch>(name, "an input lives on ", s.device()->name(),
                                   ", not on ", dev->name());
    }
    steps.push_back(&s);
  }
  return detail::launch<T>(
      dev, {detail::StepKind::compute, std::move(name), cost}, out_shape, steps,
      [kernel = std::move(kernel)](const detail::Step& s) mutable {
        KernelArgs<T> args;
        args.inputs.reserve(s.input_count());
        for (std::size_t i = 0; i < s.input_count(); ++i) {
          args.inputs.emplace_back(s.in<T>(i),
                                   static_cast<std::size_t>(s.input_step(i).shape().numel()));
        }
        args.output = std::span<T>(s.out<T>(), static_cast<std::size_t>(s.shape().numel()));
        kernel(std::move(args));
      });
}

}  // namespace ferry
