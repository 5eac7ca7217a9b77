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
#include "ferry/ops/gradient.hpp"

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

namespace detail {

/// Runs a custom step's backward rule and checks what it gives back.
template <Element T, class Backward>
void custom_backward(const std::string& name, const Backward& backward, GradCall& c) {
  std::vector<DeviceArray<T>> inputs;
  for (Step* s : c.inputs) inputs.push_back(as_array<T>(s));
  std::vector<DeviceArray<T>> grads =
      backward(inputs, as_array<T>(&c.output), ArrayAccess::wrap<T>(Handle(c.cotangent)));
  if (grads.size() != inputs.size()) {
    fail<InvalidArgument>(name, "backward returned ", grads.size(), " gradients for ",
                          inputs.size(), " inputs");
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Step* g = ArrayAccess::step(grads[i]);
    if (g == nullptr) continue;
    if (g->shape() != c.inputs[i]->shape()) {
      fail<ShapeError>(name, "backward returned a gradient of shape ", g->shape(), " for input ",
                       i, " of shape ", c.inputs[i]->shape());
    }
    if (g->device() != c.inputs[i]->device()) {
      fail<DeviceMismatch>(name, "backward returned a gradient on ", g->device()->name(),
                           " for input ", i, " on ", c.inputs[i]->device()->name());
    }
    set_grad(c, i, std::move(grads[i]));
  }
}

/// The step of custom, checked and submitted; `steps` gets the inputs' steps.
template <Element T, class Kernel>
DeviceArray<T> launch_custom(const Device& device, std::string name,
                             const std::vector<DeviceArray<T>>& inputs, const Shape& out_shape,
                             Kernel kernel, const Cost& cost, std::vector<Step*>& steps) {
  if (name.empty()) fail<InvalidArgument>("custom", "needs a name");
  // Whatever can be empty (std::function, a function pointer) is refused now: calling it in
  // the kernel would throw std::bad_function_call (or crash) at an export far from here.
  if constexpr (kNullableKernel<Kernel>) {
    if (!static_cast<bool>(kernel)) fail<InvalidArgument>(name, "got an empty kernel");
  }
  if (cost.flops < 0 || cost.bytes_read < 0 || cost.bytes_written < 0) {
    fail<InvalidArgument>(name, "negative cost: ", cost.flops, " flops, ", cost.bytes_read,
                          " bytes read, ", cost.bytes_written, " bytes written");
  }
  // The model turns a cost into whole nanoseconds: NaN or infinity has no such value.
  if (!std::isfinite(cost.flops) || !std::isfinite(cost.bytes_read) ||
      !std::isfinite(cost.bytes_written)) {
    fail<InvalidArgument>(name, "cost is not finite: ", cost.flops, " flops, ", cost.bytes_read,
                          " bytes read, ", cost.bytes_written, " bytes written");
  }
  if (cost.fixed_duration && *cost.fixed_duration < Duration::zero()) {
    fail<InvalidArgument>(name, "negative fixed duration of ", cost.fixed_duration->count(), " ns");
  }
  if (static_cast<int>(cost.work) > static_cast<int>(Work::matmul)) {
    fail<InvalidArgument>(name, "unknown Work ", static_cast<int>(cost.work));
  }
  const auto& g = cost.grid;
  std::string grid;  // "{batch, m, k, n}", as both messages below show it
  for (const std::int64_t d : g) grid += (grid.empty() ? "{" : ", ") + std::to_string(d);
  grid += '}';
  if (cost.tiles < 0 || g[0] < 0 || g[1] < 0 || g[2] < 0 || g[3] < 0) {
    fail<InvalidArgument>(name, "negative tiles ", cost.tiles, " or grid ", grid);
  }
  // The model plans a matmul's tiles from its grid: without one, its flops would take no time.
  if (cost.work == Work::matmul && cost.tiles == 0 && !cost.fixed_duration && cost.flops > 0 &&
      (g[0] == 0 || g[1] == 0 || g[2] == 0 || g[3] == 0)) {
    fail<InvalidArgument>(name, "Work::matmul of ", cost.flops,
                          " flops needs its grid {batch, m, k, n} (or tiles), got ", grid);
  }
  const auto& dev = DeviceAccess::state(device);
  // The model counts whole nanoseconds in 64 bits: a step longer than it times is refused here
  // rather than overflowing the device's figures (a fixed duration included).
  const Duration alone = dev->with_observer(
      [&](StepObserver& m) { return model_solo_duration(m, cost, dtype_of<T>); });
  if (alone > kLongestStep) {
    fail<InvalidArgument>(name, "the cost takes ", static_cast<double>(alone.count()) / 1e9,
                          " s alone on ", dev->name(),
                          ", longer than the model times one step (2^53 ns, about 104 days): ",
                          cost.flops, " flops, ", cost.bytes_read, " bytes read, ",
                          cost.bytes_written, " bytes written");
  }
  steps.reserve(inputs.size());
  for (const DeviceArray<T>& a : inputs) {
    Step& s = step_of(name, a);
    if (s.device() != dev) {
      fail<DeviceMismatch>(name, "an input lives on ", s.device()->name(), ", not on ",
                           dev->name());
    }
    steps.push_back(&s);
  }
  return launch<T>(
      dev, {StepKind::compute, std::move(name), cost}, out_shape, steps,
      [kernel = std::move(kernel)](const Step& s) mutable {
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

}  // namespace detail

/// A step named `name` on `device` that runs `kernel(KernelArgs<T>)` once `inputs` are computed
/// and writes an array of `out_shape`; the model charges it `cost` (a roofline of flops and
/// bytes, or Cost::fixed). An exception the kernel throws reaches the exports that depend on
/// it. Throws at the call: InvalidArgument for an empty name, an empty kernel (a
/// default-constructed std::function, a null function pointer), a negative or non-finite cost
/// (a fixed duration included), negative tiles or grid sizes, a Work::matmul with flops but
/// neither tiles nor a whole grid, a cost that takes longer than 2^53 ns (about 104 days) alone
/// on the device, or an empty handle; DeviceMismatch for an input on another device.
template <Element T, class Kernel>
  requires std::invocable<Kernel&, KernelArgs<T>>
DeviceArray<T> custom(const Device& device, std::string name,
                      const std::vector<DeviceArray<T>>& inputs, Shape out_shape, Kernel kernel,
                      Cost cost) {
  std::vector<detail::Step*> steps;
  DeviceArray<T> out = detail::launch_custom<T>(device, std::move(name), inputs, out_shape,
                                                std::move(kernel), cost, steps);
  // Recorded without a rule: a gradient asked through it is refused (see the overload below).
  if (detail::Tape* tape = detail::outermost_tape()) {
    detail::record_no_grad(*tape, steps, *detail::ArrayAccess::step(out));
  }
  return out;
}

/// custom with a backward rule, so gradients flow through the step: `backward(inputs, output,
/// cotangent)` returns one array per input, the cotangent of that input (an empty handle for
/// none), each of its input's shape and on the device. It is called by ferry::grad and its kin
/// when the backward pass reaches the step, and is written with ferry's ops (it returns at
/// once, like them). Throws at the call like custom; the backward pass throws InvalidArgument
/// naming the step when `backward` returns the wrong number of arrays, ShapeError or
/// DeviceMismatch for a gradient of the wrong shape or device.
template <Element T, class Kernel, class Backward>
  requires std::invocable<Kernel&, KernelArgs<T>> &&
           std::is_invocable_r_v<std::vector<DeviceArray<T>>, const Backward&,
                                 const std::vector<DeviceArray<T>>&, const DeviceArray<T>&,
                                 const DeviceArray<T>&>
DeviceArray<T> custom(const Device& device, std::string name,
                      const std::vector<DeviceArray<T>>& inputs, Shape out_shape, Kernel kernel,
                      Cost cost, Backward backward) {
  std::vector<detail::Step*> steps;
  DeviceArray<T> out = detail::launch_custom<T>(device, name, inputs, out_shape, std::move(kernel),
                                                cost, steps);
  if (detail::Tape* tape = detail::outermost_tape()) {
    detail::record_grad<T>(*tape, steps, *detail::ArrayAccess::step(out),
                           [name, backward = std::move(backward)](auto, detail::GradCall& c) {
                             detail::custom_backward<T>(name, backward, c);
                           });
  }
  return out;
}

}  // namespace ferry
