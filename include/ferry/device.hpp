#pragma once
// ferry::Device: where arrays live and steps run. A handle; copies name the same device.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "ferry/core/config.hpp"
#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/text_file.hpp"
#include "ferry/executor.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/model/stats.hpp"
#include "ferry/runtime/device_state.hpp"

namespace ferry {

namespace detail {
struct DeviceAccess;

// The seam between a Device and its model (ferry/device_model_access.hpp defines them): a unit
// that makes or asks a modeled device compiles none of the model, whose code is compiled once
// in the separate-compilation mode (ferry/src.hpp).
FERRY_DECL std::unique_ptr<StepObserver> make_device_model(const DeviceSpec& spec,
                                                           const std::string& name);
FERRY_DECL DeviceSpec model_spec(StepObserver& model, const std::string& device);
FERRY_DECL DeviceStats model_stats(StepObserver& model, const std::string& device);
FERRY_DECL void model_reset_stats(StepObserver& model, const std::string& device);
FERRY_DECL std::string model_trace_json(StepObserver& model, const std::string& device);
FERRY_DECL std::string model_timeline_text(StepObserver& model, const std::string& device);
/// How long a compute step of `cost` on `dtype` takes alone on the device `model` times (its
/// conversions stop at 2^62 ns); zero when `model` is not ferry's.
FERRY_DECL Duration model_solo_duration(StepObserver& model, const Cost& cost, DType dtype);
}  // namespace detail

/// The tag of a model-only device or mesh: `Device::modeled(spec, ferry::model_only)`.
struct ModelOnly {
  explicit ModelOnly() = default;
};
/// Kernels compute nothing and outputs get no host memory; the timeline is the computing
/// device's, so a program far too large to compute can still be modeled.
inline constexpr ModelOnly model_only{};

/// A device: a modeled accelerator, or the host CPU. Kernels compute real values on an
/// Executor's threads; the device's model (a DeviceSpec) says when each step would run on the
/// device it describes. Arrays of two devices never meet in one op (DeviceMismatch). A device
/// stays alive while any handle, array or pending step uses it.
class Device {
  /// Runs `f(observer, name)` under the device's lock.
  template <class F>
  decltype(auto) with_model(F&& f) const {
    return state_->with_observer(
        [&](detail::StepObserver& o) -> decltype(auto) { return f(o, name()); });
  }

 public:
  /// A new modeled accelerator shaped like specs::pcie_accelerator(), on Executor::shared().
  Device() : Device(Executor::shared()) {}

  /// A new modeled pcie_accelerator whose kernels run on `executor`.
  explicit Device(Executor executor)
      : Device(std::move(executor), specs::pcie_accelerator(), next_name()) {}

  /// A new modeled accelerator described by `spec`. Throws InvalidArgument for a spec no device
  /// could have (a rate or capacity that is not positive, a rate under 1 per second, a negative
  /// time or one past 2^53 ns, more than 65536 compute units, a `matmul_tile` outside [16,
  /// 2^18], a `policy` or `fallback` outside its enumeration, a fault rate that is not a
  /// probability).
  static Device modeled(DeviceSpec spec, Executor executor = Executor::shared()) {
    detail::validate(spec);
    return Device(std::move(executor), std::move(spec), next_name());
  }

  /// A model-only device described by `spec`: the same model and the same timeline as
  /// modeled(spec), but kernels compute nothing and no host memory is given to outputs, so a
  /// program far too large to compute can be modeled. Exports (to_host, item, a copy to a
  /// computing device) throw NoValues naming the op that made the array; wait, stats() and
  /// the trace work. Throws InvalidArgument like modeled(spec).
  static Device modeled(DeviceSpec spec, ModelOnly, Executor executor = Executor::shared()) {
    Device d = modeled(std::move(spec), std::move(executor));
    d.state_->set_model_only();  // not yet shared: no step has been submitted
    return d;
  }

  /// Whether the device is model-only (modeled(spec, model_only)).
  bool is_model_only() const noexcept { return state_->model_only(); }

  /// The host CPU as a device: one per process, on Executor::shared(), modeled with
  /// specs::host_cpu().
  static Device cpu() {
    static const Device host(Executor::shared(), specs::host_cpu(), "cpu");
    return host;
  }

  /// "cpu", or "modeled:N" with N counting the modeled devices made by this process.
  const std::string& name() const noexcept { return state_->name(); }
  bool is_cpu() const { return *this == cpu(); }
  /// The executor whose threads run this device's kernels.
  Executor executor() const { return Executor(state_->executor_handle()); }

  /// The description the model uses.
  DeviceSpec spec() const {
    return with_model(detail::model_spec);
  }

  /// The model's figures for the work submitted since the device was made or reset_stats(),
  /// and the host memory the device keeps for reuse now (cached_bytes). Asking decides the
  /// modeled schedule of everything submitted so far: work submitted afterwards is placed
  /// after those decisions.
  DeviceStats stats() const {
    DeviceStats s = with_model(detail::model_stats);
    s.cached_bytes = state_->buffers().cached_bytes();
    return s;
  }

  // ---- the buffer cache ----
  // Kernels compute in host memory. A freed buffer of this device waits in a cache, by size
  // class, for the next output that fits it, so a loop does not pay the system for fresh
  // memory (and its page faults) at every step. Buffers under 256 bytes are recycled apart.

  /// The most bytes the cache keeps (buffers in use are not counted). Starts at a quarter of
  /// the device's modeled DRAM or of the host's memory, the smaller.
  std::size_t cache_limit() const { return state_->buffers().limit(); }
  /// Keeps at most `bytes` cached from now on (0: cache nothing), giving back what is beyond
  /// it at once. Never throws.
  void set_cache_limit(std::size_t bytes) noexcept { state_->buffers().set_limit(bytes); }
  /// Gives every cached buffer back to the system now; buffers in use are not touched. (An
  /// allocation the system refuses does this to every device before it fails.) Never throws.
  void trim() noexcept { state_->buffers().trim(); }

  /// Starts a new window for stats() and the trace, after everything submitted so far.
  void reset_stats() {
    with_model(detail::model_reset_stats);
  }

  /// Writes the window's timeline as a Chrome trace (open it in ui.perfetto.dev or
  /// chrome://tracing): a track per engine, a slice per command with its op, shape, bytes and
  /// flops, an arrow per dependency, and device memory as a counter. The same program on the
  /// same spec writes the same bytes. `path` may be a std::filesystem::path (it converts).
  /// Throws ferry::Error when the file cannot be written.
  void write_trace(const std::string& path) const {
    const std::string json = with_model(detail::model_trace_json);
    detail::write_file("write_trace", path, json);
  }

  /// The window as a compact text Gantt chart, for a terminal.
  std::string timeline_text() const {
    return with_model(detail::model_timeline_text);
  }

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
  Device(Executor executor, std::unique_ptr<detail::StepObserver> model, std::string name,
         std::uint64_t device_bytes = 0)
      : Device(std::make_shared<detail::DeviceState>(
            std::move(name), std::move(executor.impl_), std::move(model),
            detail::BufferCache::default_limit(device_bytes))) {}

  Device(Executor executor, DeviceSpec spec, std::string name)
      : Device(std::move(executor), detail::make_device_model(spec, name), name,
               spec.dram_bytes > 0 ? static_cast<std::uint64_t>(spec.dram_bytes) : 0) {}

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

#if !defined(FERRY_SEPARATE_COMPILATION)
#include "ferry/device_model_access.hpp"
#endif
