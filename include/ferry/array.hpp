#pragma once
// DeviceArray<T>: the typed face of a graph step. A handle is one pointer: copying it copies a
// reference, and its shape, device and element type are known the moment it is returned.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/device.hpp"
#include "ferry/host_array.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/layout.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/handle.hpp"
#include "ferry/runtime/recorder.hpp"
#include "ferry/runtime/step.hpp"
#include "ferry/runtime/tape.hpp"

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
/// `dev`.
template <class Kernel>
Ref<Step> submit_step(const std::shared_ptr<DeviceState>& dev, StepInfo info, DType dtype,
                      const Shape& shape, std::span<Step* const> inputs, Kernel kernel) {
  auto* s = new KernelStep<Kernel>(dev, dev->executor(), std::move(info), dtype, shape, inputs,
                                   std::move(kernel));
  Ref<Step> ref = Ref<Step>::adopt(s);
  note_submitted(*s);
  dev->submit(*s);
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
  return submit_step(src.device(), {StepKind::compute, std::move(name), {0, in_bytes, out_bytes, {}, Work::layout}, to},
                     src.dtype(), src.shape(), inputs, [from, to, element](const Step& s) {
                       kernels::convert_order(s.in<std::byte>(0), from, s.out<std::byte>(),
                                              to.order, s.shape(), element, s.runner());
                     });
}

/// Whether an output of `shape`, `dtype` and `layout` may take over `in`'s buffer, given that
/// the caller gave its handle away: that handle is the last, no view shares the buffer, and
/// the buffer has the output's size and order. Never while a gradient tape records: a backward
/// rule may read any input of an op it recorded (the tape learns of an op only after it is
/// submitted, too late to keep its inputs).
inline bool donatable(const Step& in, DType dtype, const Shape& shape, Layout layout) noexcept {
  return t_tape == nullptr && in.handles() == 1 && in.views() == 0 && in.info().kind != StepKind::view &&
         in.dtype() == dtype && in.shape() == shape && in.layout() == layout;
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
                                            "to_layout for " + info.name));
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
                     " has no values: the device is model-only");
    }
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
  StepInfo info{StepKind::view, std::string(name), {}};
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

/// The backward rules of astype and DeviceArray::to (ferry/autodiff/array_rules.hpp).
template <Element From, Floating To>
void astype_backward(Tag<To>, GradCall& c);
template <Floating T>
void transfer_backward(Tag<T>, GradCall& c);

/// Tells `r` that `call` made `out` with symbolic shape `shape` (see runtime/recorder.hpp).
template <Element T>
void record(Recorder& r, OpCall call, const DeviceArray<T>& out, const Shape& shape) {
  r.record(std::move(call), *ArrayAccess::step(out), shape);
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
  /// Known at once, whether or not the values are; symbolic inside a traced program (see
  /// ferry::jit). Throws InvalidArgument on an empty handle.
  Shape shape() const { return detail::user_shape(detail::step_of("shape", *this)); }
  DType dtype() const noexcept { return dtype_of<T>; }
  /// The device the array lives on. Throws InvalidArgument on an empty handle.
  Device device() const {
    return detail::DeviceAccess::wrap(detail::step_of("device", *this).device());
  }
  /// Where and how the values are stored, known at once. Throws like shape().
  Layout layout() const { return detail::step_of("layout", *this).layout(); }
  /// The number of elements, known at once (metadata: never waits); in a traced program it
  /// guards the sizes, as Shape::numel does. Throws InvalidArgument on an empty handle.
  std::int64_t numel() const { return detail::user_shape(detail::step_of("numel", *this)).numel(); }
  /// The number of dimensions, 0 for a scalar; known at once. Throws like numel().
  std::size_t ndim() const { return detail::step_of("ndim", *this).shape().rank(); }
  /// Never blocks: true once the values, or the error that replaced them, are available.
  bool ready() const {
    detail::Step& s = detail::step_of("ready", *this);
    detail::note_escape("ready()");
    return s.done();
  }

  /// Export: waits for the values and copies them to the host. Rethrows the exception of any
  /// step this array depends on that failed; throws ExportInsideStep inside a kernel.
  HostArray<T> to_host() const { return std::get<0>(detail::export_to_host("to_host", *this)); }

  /// Export into memory the caller owns: waits for the values and writes them (row-major)
  /// straight into `out`, which must hold exactly shape().numel() elements. The fast path for
  /// a loop: no host buffer is allocated, and `out` is warm from the last call. Throws
  /// InvalidArgument naming to_host and both sizes when `out` has another size (before
  /// anything runs); otherwise throws as to_host() does, and `out` then holds unspecified
  /// values.
  void to_host(std::span<T> out) const {
    detail::Step& s = detail::step_of("to_host", *this);
    detail::check_export_size("to_host", s, out.size());
    detail::Step* sources[] = {&s};
    const std::span<std::byte> target[] = {std::as_writable_bytes(out)};
    detail::export_buffers("to_host", sources, target);
  }

  /// Export: waits for the value of a one-element array (of any rank: a loss, a count) and
  /// returns it, as to_host() would, without a host buffer. Throws InvalidArgument naming
  /// item, with the element count and shape, for an array of another size (before anything
  /// runs); otherwise throws as to_host() does.
  T item() const {
    detail::Step& s = detail::step_of("item", *this);
    if (s.shape().numel() != 1) {
      detail::fail<InvalidArgument>("item", "needs an array of one element, not ", s.shape().numel(),
                                    " (shape ", s.shape(), ")");
    }
    T value{};
    detail::Step* sources[] = {&s};
    const std::span<std::byte> target[] = {std::as_writable_bytes(std::span<T>(&value, 1))};
    detail::export_buffers("item", sources, target);
    return value;
  }

  /// The values converted to `U` (see kernels::convert_value for the rules), as a new array.
  template <Element U>
  DeviceArray<U> astype() const {
    detail::RecordScope scope;
    detail::Step& s = detail::step_of("astype", *this);
    if constexpr (std::is_same_v<T, U>) {
      return *this;
    } else {
      DeviceArray<U> out = convert_to<U>(s);
      if (detail::Tape* tape = scope.tape()) {
        detail::Step* in[] = {&s};
        detail::record_grad<U>(*tape, in, *detail::ArrayAccess::step(out),
                               [](auto t, detail::GradCall& c) { detail::astype_backward<T>(t, c); });
      }
      if (detail::Recorder* rec = scope.recorder()) {
        detail::record(*rec,
                       {"astype", {&s}, {},
                        [](std::span<detail::Step* const> in, std::span<const std::int64_t>) {
                          return detail::handle_of(detail::as_array<T>(in[0]).template astype<U>());
                        }},
                       out, rec->shape_of(s));
      }
      return out;
    }
  }

 private:
  template <Element U>
  static DeviceArray<U> convert_to(detail::Step& s) {
      const auto n = static_cast<std::size_t>(s.shape().numel());
      const Cost cost{static_cast<double>(n), static_cast<double>(n * sizeof(T)),
                      static_cast<double>(n * sizeof(U))};
      detail::Step* inputs[] = {&s};
      return detail::launch<U>(
          s.device(), {detail::StepKind::compute, "astype", cost}, s.shape(), inputs,
          [](const detail::Step& st) {
            kernels::parallel_valid_runs(st.runner(), st.shape(), st.layout().order,
                                         kernels::chunk_elements(sizeof(T) + sizeof(U)),
                                         [&](std::size_t at, std::size_t count) {
              kernels::convert(st.in<T>(0) + at, st.out<U>() + at, count);
            });
          },
          detail::LayoutRule::elementwise);
  }

 public:
  /// The array copied to `other`, asynchronously, in the same layout: over the device-to-device
  /// link between two modeled devices (`bytes_d2d` of `other`), as an import when it comes from
  /// Device::cpu() (`bytes_h2d` of `other`), as a copy to the host when it goes to
  /// Device::cpu() (`bytes_d2h` of this array's device, on its d2h engine; the cpu times no
  /// copy of its own). The receiving device's model has the data once the sending device's
  /// model has it (or, to the cpu, once that copy is done); a failure there reaches the
  /// receiving side's exports. Returns this array when it already lives on `other`; from a
  /// device on a ManualExecutor it first runs what the array needs. Throws like shape().
  DeviceArray to(const Device& other) const {
    detail::Step& s = detail::step_of("to", *this);
    const std::shared_ptr<detail::DeviceState>& dst = detail::DeviceAccess::state(other);
    if (dst == s.device()) return *this;
    if (!s.has_values() && !dst->model_only()) {
      detail::fail<NoValues>("to", "the array ", s.info().name, " made on ", s.device()->name(),
                             " has no values to send to ", dst->name(), ": its device is model-only");
    }
    const detail::DeviceState* cpu = detail::DeviceAccess::state(Device::cpu()).get();
    const bool from_host = s.device().get() == cpu;
    const bool to_host = dst.get() == cpu;
    // A copy between the host and a device is that device's to time, on its engine for the
    // direction: the other side only sees the data arrive. Into the device, that is its
    // copy_in. Out of it, its model places the copy an export would make, and the cpu's step
    // only receives the values at its end: with no bytes to move and a spec with no copy
    // latency (specs::host_cpu), the cpu's model finishes it the moment they arrive.
    detail::Arrival from = to_host ? s.device()->send_to_host(s) : s.device()->settle(s);
    // Between two devices of one mesh, the data travels over the links of the path between
    // them (model/link_model.hpp), not over the receiving device's copy engine.
    std::int64_t from_index = 0;
    std::int64_t to_index = 0;
    const auto net = s.device()->shared_interconnect(*dst, from_index, to_index);
    if (net != nullptr) {
      from.at = net->carry(from_index, to_index, static_cast<std::int64_t>(s.output_bytes()), from.at, "to");
    }
    // A stepped executor (ManualExecutor) runs only when an export on its own device drives
    // it: nothing on `other` could, so drive it to the source's completion here.
    if (s.executor().thread_count() == 0 && &s.executor() != &dst->executor()) s.executor().wait(s);
    const auto bytes = to_host ? 0.0 : static_cast<double>(s.output_bytes());
    Cost cost{0, bytes, bytes};
    if (net != nullptr) cost.fixed_duration = Duration::zero();  // the links carried the bytes
    auto copy = [](const detail::Step& st) {
      if (st.output_bytes() != 0) {
        std::memcpy(st.out<std::byte>(), st.in<std::byte>(0), st.output_bytes());
      }
    };
    detail::Step* inputs[] = {&s};
    auto* t = new detail::KernelStep<decltype(copy)>(
        dst, dst->executor(),
        {from_host || to_host ? detail::StepKind::copy_in : detail::StepKind::copy_d2d, "to", cost, s.layout()},
        dtype_of<T>, s.shape(), inputs, copy);
    detail::Ref<detail::Step> ref = detail::Ref<detail::Step>::adopt(t);
    detail::note_submitted(*t);
    dst->submit_transfer(*t, from);
    if (detail::Tape* tape = detail::outermost_tape()) {
      detail::record_grad<T>(*tape, inputs, *t,
                             [](auto tag, detail::GradCall& c) { detail::transfer_backward(tag, c); });
    }
    return detail::ArrayAccess::wrap<T>(std::move(ref));
  }

 private:
  friend struct detail::ArrayAccess;
  detail::Handle step_;
};

}  // namespace ferry
