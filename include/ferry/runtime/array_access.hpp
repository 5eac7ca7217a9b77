#pragma once
// The runtime side of DeviceArray<T>: ArrayAccess (how code below the public API reaches an
// array's step), launch (the one path by which an op enters the graph, with its layout
// conversions and donation) and the export machinery every to_host shares (one copy_out step
// per source, one host sync for all of them). DeviceArray itself (ferry/array.hpp) is only the
// typed handle; these are its untyped workings, apart so that each file holds one concept.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/kernels/layout.hpp"
#include "ferry/runtime/buffer.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/handle.hpp"
#include "ferry/runtime/kernel_step.hpp"
#include "ferry/runtime/recorder.hpp"
#include "ferry/runtime/step.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry {

template <Element T>
class DeviceArray;
template <Element T>
class MeshArray;

namespace detail {

struct ArrayAccess {
  template <Element T>
  static Step* step(const DeviceArray<T>& a) noexcept {
    return a.step_.get();
  }
  template <Element T>
  static Handle take(DeviceArray<T>& a) noexcept {
    return std::move(a.step_);
  }
  template <Element T>
  static DeviceArray<T> wrap(Handle h) noexcept {
    DeviceArray<T> a;
    a.step_ = std::move(h);
    return a;
  }
  template <Element T>
  static DeviceArray<T> wrap(Ref<Step> s) noexcept {
    DeviceArray<T> a;
    a.step_ = Handle(std::move(s));
    return a;
  }
  /// `a`'s values converted to U as astype converts them, recorded on no gradient tape and in
  /// no program: for values nobody differentiates (parameters read from a file). astype itself
  /// would instantiate the gradient of every conversion it is used for, and with it the ops of
  /// U's source type: in a float program, every op's rule for double and bfloat16 too.
  template <Element U, Element T>
  static DeviceArray<U> convert(const DeviceArray<T>& a);
};

/// The step behind `a`; InvalidArgument naming `op` if `a` is an empty handle, UseAfterFree
/// if its buffer was freed by deallocate(force).
template <Element T>
Step& step_of(std::string_view op, const DeviceArray<T>& a) {
  Step* s = ArrayAccess::step(a);
  if (s == nullptr) {
    fail<InvalidArgument>(op, "got an empty DeviceArray (default-constructed, moved from or "
                              "deallocated)");
  }
  if (s->freed()) {
    fail<UseAfterFree>(op, "the array of shape ", s->shape(), " made by '", s->info().name,
                       "' was freed by deallocate(force)");
  }
  return *s;
}

template <Element U, Element T>
DeviceArray<U> ArrayAccess::convert(const DeviceArray<T>& a) {
  return DeviceArray<T>::template convert_to<U>(step_of("astype", a));
}

template <class X>
inline constexpr bool kIsArray = false;
template <Element T>
inline constexpr bool kIsArray<DeviceArray<T>> = true;

/// Whether X is a MeshArray (mesh/mesh_array.hpp): spmd's arguments, and a gradient's loss or
/// variable on a mesh.
template <class X>
inline constexpr bool kIsMeshArray = false;
template <Element T>
inline constexpr bool kIsMeshArray<MeshArray<T>> = true;

/// Any DeviceArray, however qualified: what ops taking their arguments by forwarding
/// reference accept.
template <class X>
concept AnyArray = kIsArray<std::remove_cvref_t<X>>;

/// True for an array argument the caller gives away (`std::move(a)` or a temporary): an op
/// may reuse its buffer, and leaves the handle empty.
template <class A>
inline constexpr bool kGiven = AnyArray<A> && !std::is_lvalue_reference_v<A> &&
                               !std::is_const_v<std::remove_reference_t<A>>;

/// Empties a handle the caller gave away, once the op that took it is submitted.
template <class A>
void consume(A&& a) noexcept {
  if constexpr (kGiven<A>) a = std::remove_cvref_t<A>{};
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

/// Builds a step running `kernel(step)` with `inputs`, exactly as given, and submits it to
/// `dev`. With `from`, a step that also waits for data from another device, arriving as
/// `from` says (DeviceState::submit_transfer): a copy of input 0, a step of that device.
template <class Kernel>
Ref<Step> submit_step(const std::shared_ptr<DeviceState>& dev, StepInfo&& info, DType dtype,
                      const Shape& shape, std::span<Step* const> inputs, Kernel kernel,
                      const Arrival* from = nullptr) {
  auto* s = new KernelStep<Kernel>(dev, dev->executor(), std::move(info), dtype, shape, inputs,
                                   std::move(kernel));
  Ref<Step> ref = Ref<Step>::adopt(s);
  note_submitted(*s);
  if (from != nullptr) {
    dev->submit_transfer(*s, *from);
  } else {
    dev->submit(*s);
  }
  return ref;
}

/// A step named `name` storing `src`'s values in layout `to`: the user's to_layout, or the
/// conversion an op makes for itself when an input is not in the layout it needs, named
/// "to_layout for <op>" in the trace and in its errors (running out of memory, a fault), so
/// that they say which call needed it.
inline Ref<Step> convert_layout(Step& src, Layout to, std::string name = "to_layout") {
  const auto in_bytes = static_cast<double>(src.output_bytes());
  const std::size_t element = size_of(src.dtype());
  const double out_bytes = static_cast<double>(storage_bytes(name, src.shape(), element, to));
  const Order from = src.layout().order;
  Step* inputs[] = {&src};
  return submit_step(
      src.device(),
      {StepKind::compute, std::move(name), {0, in_bytes, out_bytes, {}, Work::layout}, to},
      src.dtype(), src.shape(), inputs, [from, to, element](const Step& s) {
        kernels::convert_order(s.in<std::byte>(0), from, s.out<std::byte>(), to.order, s.shape(),
                               element, s.runner());
      });
}

/// Whether an output of `shape`, `dtype` and `layout` may take over `in`'s buffer, given that
/// the caller gave its handle away: that handle is the last, no view shares the buffer, and
/// the buffer has the output's size and order. Never while a gradient tape records: a backward
/// rule may read any input of an op it recorded (the tape learns of an op only after it is
/// submitted, too late to keep its inputs).
inline bool donatable(const Step& in, DType dtype, const Shape& shape, Layout layout) noexcept {
  return t_tape == nullptr && in.handles() == 1 && in.views() == 0 &&
         in.info().kind != StepKind::view && in.dtype() == dtype && in.shape() == shape &&
         in.layout() == layout;
}

/// How an op treats its inputs' layouts.
enum class LayoutRule : std::uint8_t {
  row_major,    // its kernel reads row-major: tiled inputs are converted first
  elementwise,  // inputs of one shape: if they share an order it runs on them as they are
};

/// Builds a step running `kernel(step)` and submits it to `dev`: the one path by which every op
/// enters the graph. Tiled inputs an op cannot read as they are get a conversion step first;
/// the output lives in the first input's memory space. `given` has bit i set when the caller
/// gave input i away: the first such input that is the last reference to a buffer of the
/// output's shape, type and layout is donated (the output overwrites it in place), so the
/// kernel must be safe with its output aliasing that input.
template <Element T, class Kernel>
DeviceArray<T> launch(const std::shared_ptr<DeviceState>& dev, StepInfo info, const Shape& shape,
                      std::span<Step* const> inputs, Kernel kernel,
                      LayoutRule rule = LayoutRule::row_major, std::uint32_t given = 0) {
  const std::size_t n = inputs.size();
  const bool same_order =
      std::all_of(inputs.begin(), inputs.end(), [&](const Step* in) {
        return in->layout().order == inputs.front()->layout().order;
      });
  const Order order = rule == LayoutRule::elementwise && n != 0 && same_order
                          ? inputs.front()->layout().order
                          : Order::row_major;
  info.layout = {n != 0 ? inputs.front()->layout().space : MemorySpace::dram, order};
  if (order == Order::tiled) {
    // An elementwise op writes whole tiles, padding included, as its tiled inputs are read:
    // ops state the bytes of their row-major output.
    info.cost.bytes_written =
        static_cast<double>(storage_bytes("launch", shape, sizeof(T), info.layout));
  }
  if (order == Order::row_major &&
      std::any_of(inputs.begin(), inputs.end(),
                  [](const Step* in) { return in->layout().order == Order::tiled; })) {
    // Held as handles, as a user's to_layout would be: when they go (once the step holds its
    // inputs), the model learns that the copies are freed as soon as their reader has run.
    std::vector<Handle> converted;
    std::vector<Step*> ready(inputs.begin(), inputs.end());
    for (std::size_t i = 0; i < n; ++i) {
      if (ready[i]->layout().order != Order::tiled) continue;
      converted.emplace_back(convert_layout(*ready[i], {ready[i]->layout().space, Order::row_major},
                                            "to_layout for " + info.name.to_string()));
      ready[i] = converted.back().get();
      given &= ~(1u << i);  // the caller's buffer is not the one read any more
    }
    return launch<T>(dev, std::move(info), shape, ready, std::move(kernel), rule, given);
  }
  for (std::size_t i = 0; i < n && info.donor < 0; ++i) {
    if (((given >> i) & 1u) != 0 && donatable(*inputs[i], dtype_of<T>, shape, info.layout)) {
      info.donor = static_cast<int>(i);
    }
  }
  return ArrayAccess::wrap<T>(submit_step(dev, std::move(info), dtype_of<T>, shape, inputs,
                                          std::move(kernel)));
}

/// Throws ExportInsideStep when called from a kernel: waiting there could deadlock.
inline void refuse_inside_step(std::string_view op) {
  if (t_running_step != nullptr) {
    fail<ExportInsideStep>(op, "called from inside the running step '",
                           t_running_step->info().name, "'; exports may only wait from outside");
  }
}

/// Throws NoValues, as `op`, when one of `sources` lives on a model-only device.
inline void refuse_no_values(std::string_view op, std::span<Step* const> sources) {
  for (const Step* s : sources) {
    if (!s->has_values()) {
      fail<NoValues>(op, "the array ", s->info().name, " made on ", s->device()->name(),
                     " has no values: ", s->device()->no_values_reason());
    }
  }
}

/// Tells each device's model that the host waits for its part of `steps` (one sync per
/// device, in the order each device first appears) and collects the model's verdicts:
/// errors[i] for steps[i].
inline void announce_host_sync(std::span<Step* const> steps, std::span<std::exception_ptr> errors) {
  const auto device_of = [&](std::size_t i) { return steps[i]->device().get(); };
  const bool one_device = std::all_of(steps.begin(), steps.end(), [&](const Step* s) {
    return s->device() == steps.front()->device();
  });
  if (one_device) {  // the common case, without building groups
    if (!steps.empty()) steps.front()->device()->host_sync(steps, errors);
    return;
  }
  // The steps by device, each device's in the order given: a sort, where finding each
  // device's steps among all of them was quadratic (a wait on a mesh array of 32 shards).
  std::vector<std::size_t> order(steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::less<>{}(device_of(a), device_of(b));
  });
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [begin, end) in `order`, by device
  for (std::size_t b = 0, e = 0; b < order.size(); b = e) {
    for (e = b + 1; e < order.size() && device_of(order[e]) == device_of(order[b]);) ++e;
    runs.emplace_back(b, e);
  }
  // A run's first step is its device's first in `steps`.
  std::sort(runs.begin(), runs.end(),
            [&](const auto& x, const auto& y) { return order[x.first] < order[y.first]; });
  std::vector<Step*> group;
  std::vector<std::exception_ptr> group_errors;
  for (const auto& [b, e] : runs) {
    group.clear();
    for (std::size_t k = b; k < e; ++k) group.push_back(steps[order[k]]);
    group_errors.assign(group.size(), nullptr);
    steps[order[b]]->device()->host_sync(group, group_errors);
    for (std::size_t k = b; k < e; ++k) errors[order[k]] = std::move(group_errors[k - b]);
  }
}

/// Waits for every step of `steps`, then rethrows the first failure in order: the model's
/// verdict (`errors`) if it has one for that step, else the step's own error.
inline void wait_and_rethrow(std::span<Step* const> steps,
                             std::span<const std::exception_ptr> errors) {
  for (Step* s : steps) s->executor().wait(*s);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    if (steps[i]->error()) std::rethrow_exception(steps[i]->error());
  }
}

/// A view of `s`'s values with `shape`, from byte `offset` of its buffer: no copy. A view is
/// made of the buffer's owner, never of another view, so views never chain.
template <Element T>
DeviceArray<T> launch_view(std::string_view name, Step& s, const Shape& shape, std::size_t offset) {
  Step* source = &s;
  if (s.info().kind == StepKind::view) {
    offset += s.info().view_offset;
    source = &s.input_step(0);
  }
  Step* inputs[] = {source};
  StepInfo info{StepKind::view, name, {}};
  info.view_offset = offset;
  return launch<T>(s.device(), std::move(info), shape, inputs, [](const Step&) {});
}

/// A copy_out step of `src`: copies the device bytes, row-major, into `into` (memory the caller
/// owns, of the array's row-major size), or into fresh host memory when `into` is empty.
inline Ref<Step> make_copy_out(Step& src, std::span<std::byte> into) {
  const double bytes = static_cast<double>(src.output_bytes());
  const Order order = src.layout().order;
  const std::size_t element = size_of(src.dtype());
  auto copy = [order, element](const Step& s) {
    kernels::load_from(s.in<std::byte>(0), s.out<std::byte>(), s.shape(), element, order);
  };
  Step* inputs[] = {&src};
  Ref<Step> step = Ref<Step>::adopt(new KernelStep<decltype(copy)>(
      src.device(), src.executor(), StepInfo{StepKind::copy_out, "to_host", {0, bytes, bytes}},
      src.dtype(), src.shape(), inputs, copy));
  // The kernel writes wherever the output is: given memory means no buffer is allocated.
  if (!into.empty()) step->set_output(Buffer::borrow(into.data(), into.size()));
  return step;
}

/// Throws InvalidArgument naming `op` unless `count` elements hold the array of step `s`.
inline void check_export_size(std::string_view op, const Step& s, std::size_t count) {
  if (static_cast<std::int64_t>(count) != s.shape().numel()) {
    fail<InvalidArgument>(op, "a span of ", count, " elements cannot hold the ", s.shape().numel(),
                          " elements of shape ", s.shape());
  }
}

/// The export behind every to_host: one copy_out step per source, one host sync for all of
/// them, each copy run by the calling thread as soon as its source is done. With `targets`
/// (one per source, each of its source's row-major size) the copies write straight into
/// them and nothing is returned; else returns new host buffers in order. Rethrows the first
/// failure in order.
inline std::vector<Buffer> export_buffers(std::string_view op, std::span<Step* const> sources,
                                          std::span<const std::span<std::byte>> targets = {}) {
  refuse_inside_step(op);
  refuse_no_values(op, sources);
  note_escape(op);
  std::vector<Ref<Step>> copies;
  std::vector<Step*> copy_steps;
  copies.reserve(sources.size());
  copy_steps.reserve(sources.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    Step* source = sources[i];
    copies.push_back(make_copy_out(*source, targets.empty() ? std::span<std::byte>() : targets[i]));
    copy_steps.push_back(copies.back().get());
    source->device()->submit_on_host(*copies.back());
  }
  std::vector<std::exception_ptr> verdicts(sources.size());
  announce_host_sync(copy_steps, verdicts);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    sources[i]->executor().wait(*sources[i]);
    copies[i]->run();
    copies[i]->complete([](Step& ready) { ready.executor().post(ready); });
  }
  wait_and_rethrow(copy_steps, verdicts);
  if (!targets.empty()) return {};
  std::vector<Buffer> buffers;
  buffers.reserve(copies.size());
  for (Ref<Step>& c : copies) buffers.push_back(c->take_output());
  return buffers;
}

/// A new handle to step `s`, as an array of T: how a replay hands recorded inputs to an op.
template <Element T>
DeviceArray<T> as_array(Step* s) {
  return ArrayAccess::wrap<T>(Ref<Step>::share(s));
}

/// The handle `a` holds, taken over: a replay keeps what it submits named, so the runtime never
/// sees an intermediate as unreachable before its readers are submitted.
template <Element T>
Handle handle_of(DeviceArray<T> a) noexcept {
  return ArrayAccess::take(a);
}

/// Tells `r` that `call` made `out` with symbolic shape `shape` (see runtime/recorder.hpp).
template <Element T>
void record(Recorder& r, OpCall call, const DeviceArray<T>& out, const Shape& shape) {
  r.record(std::move(call), *ArrayAccess::step(out), shape);
}

}  // namespace detail

}  // namespace ferry
