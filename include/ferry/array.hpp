#pragma once
// DeviceArray<T>: the typed face of a graph step. A handle is one pointer: copying it copies a
// reference, and its shape, device and element type are known the moment it is returned. How
// ops launch steps and how exports wait for them live in ferry/runtime/array_access.hpp.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/layout.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/device.hpp"
#include "ferry/host_array.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/kernels/layout.hpp"
#include "ferry/runtime/array_access.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/handle.hpp"
#include "ferry/runtime/kernel_step.hpp"
#include "ferry/runtime/recorder.hpp"
#include "ferry/runtime/step.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry {

namespace detail {

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

/// The backward rules of astype and DeviceArray::to (ferry/autodiff/elementwise_rules.hpp and
/// shape_rules.hpp).
template <Element From, Floating To>
void astype_backward(Tag<To>, GradCall& c);
template <Floating T>
void transfer_backward(Tag<T>, GradCall& c);

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
      detail::fail<InvalidArgument>("item", "needs an array of one element, not ",
                                    s.shape().numel(), " (shape ", s.shape(), ")");
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
        detail::record_grad<U>(
            *tape, in, *detail::ArrayAccess::step(out),
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
  /// device on a ManualExecutor it first runs what the array needs. On a mesh over processes
  /// (mpi::mesh_over), between devices that two processes own, every process makes the call:
  /// the owner of this array's device sends the bytes to the owner of `other` (and its
  /// gradient the other way). Throws like shape().
  DeviceArray to(const Device& other) const {
    detail::Step& s = detail::step_of("to", *this);
    const std::shared_ptr<detail::DeviceState>& dst = detail::DeviceAccess::state(other);
    if (dst == s.device()) return *this;
    std::int64_t from_index = 0;
    std::int64_t to_index = 0;
    const auto net = s.device()->shared_interconnect(*dst, from_index, to_index);
    // Between devices that two processes own (a mesh over processes): a call every process
    // makes, the owner sending the bytes. Else a copy of this process.
    detail::Ref<detail::Step> ref;
    if (net != nullptr) ref = net->copy_across(s, dst, from_index, to_index, "to");
    if (!ref) ref = copy_to(s, dst, net.get(), from_index, to_index);
    // Its backward is the copy back; over processes every process makes it too, as each walks
    // the same tape.
    if (detail::Tape* tape = detail::outermost_tape()) {
      detail::Step* source[] = {&s};
      detail::record_grad<T>(*tape, source, *ref, [](auto tag, detail::GradCall& c) {
        detail::transfer_backward(tag, c);
      });
    }
    return detail::ArrayAccess::wrap<T>(std::move(ref));
  }

 private:
  /// to()'s copy within this process: `s` to `dst`, over the links of `net` (members
  /// `from_index` and `to_index`) when both are devices of one mesh, else over `dst`'s engine.
  static detail::Ref<detail::Step> copy_to(detail::Step& s,
                                           const std::shared_ptr<detail::DeviceState>& dst,
                                           detail::Interconnect* net,
                                           std::int64_t from_index, std::int64_t to_index) {
    if (!s.has_values() && !dst->model_only()) {
      detail::fail<NoValues>("to", "the array ", s.info().name, " made on ", s.device()->name(),
                             " has no values to send to ", dst->name(), ": ",
                             s.device()->no_values_reason());
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
    if (net != nullptr) {
      from.at = net->carry(from_index, to_index, static_cast<std::int64_t>(s.output_bytes()),
                           from.at, "to");
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
    detail::Ref<detail::Step> ref = detail::submit_step(
        dst,
        {from_host || to_host ? detail::StepKind::copy_in : detail::StepKind::copy_d2d, "to", cost,
         s.layout()},
        dtype_of<T>, s.shape(), inputs, copy, &from);
    // Over links, the source is read until its data arrives (mesh/collective_receive.hpp's
    // read_over_links); over the receiving device's own engine, it is read by that copy, which
    // that device's model alone places.
    if (net != nullptr) s.device()->read_until(s, from.at);
    return ref;
  }

  friend struct detail::ArrayAccess;
  detail::Handle step_;
};

}  // namespace ferry
