#pragma once
// Import and export: the only calls that move data across the host boundary, and the only
// ones that may block.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/device.hpp"
#include "ferry/host_array.hpp"
#include "ferry/runtime/kernel_step.hpp"

namespace ferry {

namespace detail {

inline void check_import_size(std::size_t count, const Shape& shape) {
  if (static_cast<std::int64_t>(count) != shape.numel()) {
    fail<InvalidArgument>("to_device", count, " values for shape ", shape, " of ", shape.numel(),
                          " elements");
  }
}

/// An import: the step is complete on arrival, holding `buffer` (row-major values) stored in
/// `layout`; the model sees a copy_in of the stored bytes, a step named `op` (the function the
/// user called: its faults and out-of-memory errors name it).
template <Element T>
DeviceArray<T> import_buffer(const Device& device, const Shape& shape, Buffer buffer,
                             Layout layout, std::string_view op = "to_device") {
  const std::shared_ptr<DeviceState>& dev = DeviceAccess::state(device);
  if (layout.order == Order::tiled && !dev->model_only()) {
    Buffer tiled = Buffer::allocate(storage_bytes(op, shape, sizeof(T), layout),
                                    &dev->buffers(), op);
    kernels::store_as(buffer.data(), tiled.data(), shape, sizeof(T), Order::tiled);
    buffer = std::move(tiled);
  }
  // The stored bytes: a model-only device was given no buffer, and costs them all the same.
  const auto bytes = static_cast<double>(storage_bytes(op, shape, sizeof(T), layout));
  auto nothing = [](const Step&) {};
  auto* s = new KernelStep<decltype(nothing)>(
      dev, dev->executor(), {StepKind::copy_in, op, {0, bytes, bytes}, layout},
      dtype_of<T>, shape, {}, nothing);
  Ref<Step> ref = Ref<Step>::adopt(s);
  s->set_output(std::move(buffer));
  note_submitted(*s);
  dev->submit_done(*s);
  return ArrayAccess::wrap<T>(std::move(ref));
}

/// Checks the count and the layout of an import before anything is copied.
inline void check_import(std::size_t count, const Shape& shape, Layout layout) {
  check_import_size(count, shape);
  check_layout("to_device", shape, layout);
}

}  // namespace detail

/// Import: copies `values` (row-major) to `device`, stored in `layout`, and returns at once;
/// `values` may be reused as soon as the call returns. Throws InvalidArgument when the count
/// is not `shape.numel()` or no array of `shape` can have `layout` (a tiled scalar), and
/// OutOfHostMemory when the host has no room for the copy.
template <Element T>
DeviceArray<T> to_device(const Device& device, std::span<const T> values, Shape shape,
                         Layout layout = {}) {
  detail::check_import(values.size(), shape, layout);
  const std::shared_ptr<detail::DeviceState>& dev = detail::DeviceAccess::state(device);
  if (dev->model_only())
    return detail::import_buffer<T>(device, shape, detail::Buffer(), layout);  // no copy
  return detail::import_buffer<T>(
      device, shape,
      detail::Buffer::copy_of(values.data(), values.size_bytes(), &dev->buffers(), "to_device"),
      layout);
}

/// Import that takes ownership of `values`: no copy at all (into a row-major layout).
template <Element T>
  requires(!std::is_same_v<T, bool>)
DeviceArray<T> to_device(const Device& device, std::vector<T>&& values, Shape shape,
                         Layout layout = {}) {
  detail::check_import(values.size(), shape, layout);
  return detail::import_buffer<T>(device, shape, detail::Buffer::adopt(std::move(values)), layout);
}

/// Import of a vector the caller keeps: copies it.
template <Element T>
DeviceArray<T> to_device(const Device& device, const std::vector<T>& values, Shape shape,
                         Layout layout = {}) {
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is not contiguous: repack it
    detail::check_import(values.size(), shape, layout);  // so that errors name to_device
    const HostArray<bool> packed(shape, values);
    return to_device(device, std::span<const bool>(packed.data()), shape, layout);
  } else {
    return to_device(device, std::span<const T>(values), shape, layout);
  }
}

/// Import of a braced list: `to_device(dev, {1.0f, 2.0f}, Shape{2})`.
template <Element T>
DeviceArray<T> to_device(const Device& device, std::initializer_list<T> values, Shape shape,
                         Layout layout = {}) {
  return to_device(device, std::span<const T>(values.begin(), values.size()), shape, layout);
}

/// Import of a host array, with its shape.
template <Element T>
DeviceArray<T> to_device(const Device& device, const HostArray<T>& values, Layout layout = {}) {
  return to_device(device, values.data(), values.shape(), layout);
}

/// Export of one array: the same as `a.to_host()`.
template <Element T>
HostArray<T> to_host(const DeviceArray<T>& a) {
  return a.to_host();
}

/// Batched export: one host sync for all the arrays, values returned in order, so
/// `auto [a, b] = ferry::to_host(y, z);`. Rethrows the error of the first array (in argument
/// order) that depends on a failed step.
template <Element T0, Element T1, Element... Ts>
std::tuple<HostArray<T0>, HostArray<T1>, HostArray<Ts>...> to_host(const DeviceArray<T0>& a0,
                                                                 const DeviceArray<T1>& a1,
                                                                 const DeviceArray<Ts>&... rest) {
  return detail::export_to_host("to_host", a0, a1, rest...);
}

/// Batched export of a vector of arrays (a split's parts, a fan-out's results): one host sync
/// for all, values in order. Rethrows like the variadic form.
template <Element T>
std::vector<HostArray<T>> to_host(const std::vector<DeviceArray<T>>& arrays) {
  std::vector<detail::Step*> sources;
  sources.reserve(arrays.size());
  for (const DeviceArray<T>& a : arrays) sources.push_back(&detail::step_of("to_host", a));
  std::vector<detail::Buffer> buffers = detail::export_buffers("to_host", sources);
  std::vector<HostArray<T>> out;
  out.reserve(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    out.push_back(HostArray<T>::adopt(sources[i]->shape(), std::move(buffers[i])));
  }
  return out;
}

/// One array and the memory its values go to: an export target, made by ferry::into.
template <Element T>
struct Into {
  const DeviceArray<T>* array;
  std::span<T> out;
};

/// `a`'s values are to go to `out` (exactly `a.shape().numel()` elements the caller owns):
/// `ferry::to_host(ferry::into(y, y_out), ferry::into(z, z_out));`. `a` must outlive the
/// export it is given to.
template <Element T>
Into<T> into(const DeviceArray<T>& a, std::span<T> out) noexcept {
  return {&a, out};
}

namespace detail {

/// The step behind `target` and the bytes it goes to; throws (naming to_host) for an empty or
/// freed array or a span of the wrong size.
template <Element T>
void check_into(const Into<T>& target, Step*& step, std::span<std::byte>& bytes) {
  step = &step_of("to_host", *target.array);
  check_export_size("to_host", *step, target.out.size());
  bytes = std::as_writable_bytes(target.out);
}

}  // namespace detail

/// Batched export into memory the caller owns: one host sync for all the targets, each
/// array's values written straight into its span, so a loop allocates nothing. Throws
/// InvalidArgument naming to_host and both sizes when a span does not hold its array's
/// elements (before anything runs); otherwise rethrows like the batched to_host, and the
/// spans then hold unspecified values.
template <Element... Ts>
  requires(sizeof...(Ts) >= 1)
void to_host(const Into<Ts>&... targets) {
  std::array<detail::Step*, sizeof...(Ts)> steps{};
  std::array<std::span<std::byte>, sizeof...(Ts)> bytes{};
  std::size_t i = 0;
  ((detail::check_into(targets, steps[i], bytes[i]), ++i), ...);
  detail::export_buffers("to_host", steps, bytes);
}

/// Batched export of a vector of targets (a split's parts into the rows of one host
/// matrix): as the variadic form.
template <Element T>
void to_host(const std::vector<Into<T>>& targets) {
  std::vector<detail::Step*> steps(targets.size());
  std::vector<std::span<std::byte>> bytes(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i)
    detail::check_into(targets[i], steps[i], bytes[i]);
  detail::export_buffers("to_host", steps, bytes);
}

/// Barrier without copying: returns once every array is computed. Rethrows like to_host.
template <Element... Ts>
void wait(const DeviceArray<Ts>&... arrays) {
  detail::refuse_inside_step("wait");
  detail::note_escape("wait");
  std::array<detail::Step*, sizeof...(Ts)> steps{&detail::step_of("wait", arrays)...};
  std::array<std::exception_ptr, sizeof...(Ts)> verdicts{};
  detail::announce_host_sync(steps, verdicts);
  detail::wait_and_rethrow(steps, verdicts);
}

/// Barrier over a vector of arrays (a split's parts, a batch of results).
template <Element T>
void wait(const std::vector<DeviceArray<T>>& arrays) {
  detail::refuse_inside_step("wait");
  detail::note_escape("wait");
  std::vector<detail::Step*> steps;
  steps.reserve(arrays.size());
  for (const DeviceArray<T>& a : arrays) steps.push_back(&detail::step_of("wait", a));
  if (steps.empty()) return;
  std::vector<std::exception_ptr> verdicts(steps.size());
  detail::announce_host_sync(steps, verdicts);
  detail::wait_and_rethrow(steps, verdicts);
}

}  // namespace ferry
