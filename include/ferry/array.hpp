#pragma once
// DeviceArray<T>: the typed face of a graph step. A handle is one pointer: copying it copies a
// reference, and its shape, device and element type are known the moment it is returned.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/device.hpp"
#include "ferry/host_array.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/handle.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry {

template <Element T>
class DeviceArray;

namespace detail {

struct ArrayAccess {
  template <Element T>
  static Step* step(const DeviceArray<T>& a) noexcept {
    return a.step_.get();
  }
  template <Element T>
  static DeviceArray<T> wrap(Ref<Step> s) noexcept {
    DeviceArray<T> a;
    a.step_ = Handle(std::move(s));
    return a;
  }
};

/// The step behind `a`; InvalidArgument naming `op` if `a` is an empty handle.
template <Element T>
Step& step_of(std::string_view op, const DeviceArray<T>& a) {
  Step* s = ArrayAccess::step(a);
  if (s == nullptr) {
    fail<InvalidArgument>(op, "got an empty DeviceArray (default-constructed or moved from)");
  }
  return *s;
}

/// The device every step of `steps` lives on; DeviceMismatch naming `op` and two devices
/// otherwise.
inline const std::shared_ptr<DeviceState>& common_device(std::string_view op,
                                                         std::span<Step* const> steps) {
  const std::shared_ptr<DeviceState>& dev = steps.front()->device();
  for (Step* s : steps.subspan(1)) {
    if (s->device() != dev) {
      fail<DeviceMismatch>(op, "arrays live on different devices: ", dev->name(), " and ",
                           s->device()->name());
    }
  }
  return dev;
}

/// Builds a step running `kernel(step)` with `inputs` and submits it to `dev`: the one path
/// by which every op enters the graph.
template <Element T, class Kernel>
DeviceArray<T> launch(const std::shared_ptr<DeviceState>& dev, StepInfo info, const Shape& shape,
                      std::span<Step* const> inputs, Kernel kernel) {
  auto* s = new KernelStep<Kernel>(dev, dev->executor(), std::move(info), dtype_of<T>, shape,
                                   inputs, std::move(kernel));
  Ref<Step> ref = Ref<Step>::adopt(s);
  dev->submit(*s);
  return ArrayAccess::wrap<T>(std::move(ref));
}

/// Throws ExportInsideStep when called from a kernel: waiting there could deadlock.
inline void refuse_inside_step(std::string_view op) {
  if (t_running_step != nullptr) {
    fail<ExportInsideStep>(op, "called from inside the running step '",
                           t_running_step->info().name, "'; exports may only wait from outside");
  }
}

/// Tells each device's model that the host waits for its part of `steps` (one sync per
/// device) and collects the model's verdicts: errors[i] for steps[i].
inline void announce_host_sync(std::span<Step* const> steps, std::span<std::exception_ptr> errors) {
  const bool one_device = std::all_of(steps.begin(), steps.end(), [&](const Step* s) {
    return s->device() == steps.front()->device();
  });
  if (one_device) {  // the common case, without building groups
    if (!steps.empty()) steps.front()->device()->host_sync(steps, errors);
    return;
  }
  std::vector<Step*> group;
  std::vector<std::exception_ptr> group_errors;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    DeviceState* dev = steps[i]->device().get();
    bool seen = false;
    for (std::size_t j = 0; j < i && !seen; ++j) seen = steps[j]->device().get() == dev;
    if (seen) continue;
    group.clear();
    for (Step* s : steps.subspan(i)) {
      if (s->device().get() == dev) group.push_back(s);
    }
    group_errors.assign(group.size(), nullptr);
    dev->host_sync(group, group_errors);
    for (std::size_t j = i, g = 0; j < steps.size(); ++j) {
      if (steps[j]->device().get() == dev) errors[j] = group_errors[g++];
    }
  }
}

/// Waits for every step of `steps`, then rethrows the first failure in order: the model's
/// verdict (`errors`) if it has one for that step, else the step's own error.
inline void wait_and_rethrow(std::span<Step* const> steps, std::span<const std::exception_ptr> errors) {
  for (Step* s : steps) s->executor().wait(*s);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    if (steps[i]->error()) std::rethrow_exception(steps[i]->error());
  }
}

/// A copy_out step of `src`: copies the device bytes into fresh host memory.
inline Ref<Step> make_copy_out(Step& src) {
  const double bytes = static_cast<double>(src.output_bytes());
  auto copy = [](const Step& s) {
    // An empty array has no buffer at all: memcpy must not see its null pointers.
    if (s.output_bytes() != 0) std::memcpy(s.out<std::byte>(), s.in<std::byte>(0), s.output_bytes());
  };
  Step* inputs[] = {&src};
  return Ref<Step>::adopt(new KernelStep<decltype(copy)>(
      src.device(), src.executor(), StepInfo{StepKind::copy_out, "to_host", {0, bytes, bytes}},
      src.dtype(), src.shape(), inputs, copy));
}

/// The export behind every to_host: one copy_out step per source, one host sync for all of
/// them, each copy run by the calling thread as soon as its source is done. Returns the host
/// buffers in order; rethrows the first failure in order.
inline std::vector<Buffer> export_buffers(std::string_view op, std::span<Step* const> sources) {
  refuse_inside_step(op);
  std::vector<Ref<Step>> copies;
  std::vector<Step*> copy_steps;
  copies.reserve(sources.size());
  copy_steps.reserve(sources.size());
  for (Step* source : sources) {
    copies.push_back(make_copy_out(*source));
    copy_steps.push_back(copies.back().get());
    source->device()->submit_on_host(*copies.back());
  }
  std::vector<std::exception_ptr> verdicts(sources.size());
  announce_host_sync(copy_steps, verdicts);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    sources[i]->executor().wait(*sources[i]);
    copies[i]->run();
    copies[i]->complete([](Step&) {});
  }
  wait_and_rethrow(copy_steps, verdicts);
  std::vector<Buffer> buffers;
  buffers.reserve(copies.size());
  for (Ref<Step>& c : copies) buffers.push_back(c->take_output());
  return buffers;
}

/// to_host of a fixed set of arrays, possibly of different element types.
template <Element... Ts>
std::tuple<HostArray<Ts>...> export_to_host(std::string_view op, const DeviceArray<Ts>&... arrays) {
  std::array<Step*, sizeof...(Ts)> sources{&step_of(op, arrays)...};
  std::vector<Buffer> buffers = export_buffers(op, sources);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple<HostArray<Ts>...>{
        HostArray<Ts>::adopt(sources[I]->shape(), std::move(buffers[I]))...};
  }(std::index_sequence_for<Ts...>{});
}

}  // namespace detail

/// A future n-dimensional array of `T` on a device: the result of an op that may not have run
/// yet. Handles are cheap to copy and safe to use from any thread. Arrays are immutable.
template <Element T>
class DeviceArray {
 public:
  using value_type = T;

  /// An empty handle; every use of it throws InvalidArgument. Exists so arrays can sit in
  /// containers and structs.
  DeviceArray() noexcept = default;

  /// False for a default-constructed or moved-from handle.
  bool valid() const noexcept { return static_cast<bool>(step_); }
  /// Known at once, whether or not the values are. Throws InvalidArgument on an empty handle.
  const Shape& shape() const { return detail::step_of("shape", *this).shape(); }
  DType dtype() const noexcept { return dtype_of<T>; }
  /// The device the array lives on. Throws InvalidArgument on an empty handle.
  Device device() const {
    return detail::DeviceAccess::wrap(detail::step_of("device", *this).device());
  }
  /// Never blocks: true once the values, or the error that replaced them, are available.
  bool ready() const { return detail::step_of("ready", *this).done(); }

  /// Export: waits for the values and copies them to the host. Rethrows the exception of any
  /// step this array depends on that failed; throws ExportInsideStep inside a kernel.
  HostArray<T> to_host() const { return std::get<0>(detail::export_to_host("to_host", *this)); }

  /// The values converted to `U` (see kernels::convert_value for the rules), as a new array.
  template <Element U>
  DeviceArray<U> astype() const {
    detail::Step& s = detail::step_of("astype", *this);
    if constexpr (std::is_same_v<T, U>) {
      return *this;
    } else {
      const auto n = static_cast<std::size_t>(s.shape().numel());
      const Cost cost{static_cast<double>(n), static_cast<double>(n * sizeof(T)),
                      static_cast<double>(n * sizeof(U))};
      detail::Step* inputs[] = {&s};
      return detail::launch<U>(s.device(), {detail::StepKind::compute, "astype", cost}, s.shape(),
                               inputs, [n](const detail::Step& st) {
                                 kernels::convert(st.in<T>(0), st.out<U>(), n);
                               });
    }
  }

 private:
  friend struct detail::ArrayAccess;
  detail::Handle step_;
};

}  // namespace ferry
