#pragma once
// ferry::Mesh: devices on one interconnect. Each device is a modeled Device of its own (its
// kernels, its memory, its stats); the links between them are one LinkModel the mesh owns, on
// which every collective places its messages (model/link_model.hpp). The devices' clocks share
// their origin, the mesh's creation, so one trace shows the devices and the links side by side.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/core/text_file.hpp"
#include "ferry/device.hpp"
#include "ferry/executor.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/model/device_model.hpp"
#include "ferry/model/link_model.hpp"
#include "ferry/model/mesh_spec.hpp"
#include "ferry/model/stats.hpp"
#include "ferry/runtime/interconnect.hpp"
#include "ferry/runtime/remote.hpp"

namespace ferry {

/// What a mesh did in the current window (since it was made or reset_stats()).
struct MeshStats {
  /// From the window's start to the last end of any device's work or any link's message.
  Duration makespan{};
  /// No schedule could be shorter: the longest of the devices' lower bounds and of the links'
  /// busy times, each the part of it past the mesh's window start (a device's own window may
  /// start earlier, reset_stats, and the links may carry a message of the window before it).
  Duration lower_bound{};
  /// Each device's own figures, row-major.
  std::vector<DeviceStats> devices;
  /// Each link that carried something, in the order first used.
  std::vector<LinkStats> links;
  /// Time at least one link was busy, from the window's start.
  Duration communication_time{};
  /// The part of communication_time during which some compute unit of the mesh was busy too:
  /// communication the compute hid.
  Duration communication_overlap{};

  /// lower_bound / makespan (1 for an empty window).
  double efficiency() const noexcept {
    return makespan.count() == 0
               ? 1.0
               : static_cast<double>(lower_bound.count()) / static_cast<double>(makespan.count());
  }
};

namespace detail {

struct MeshAccess;
struct MeshState;

/// The links of a mesh: the link model, and the path a copy between two of its devices takes.
class MeshNet final : public Interconnect {
 public:
  // Its own copy of the spec: a device may still copy over the links after the Mesh is gone.
  explicit MeshNet(const MeshSpec& spec) : spec_(spec), links(spec_) {}

  /// How a mesh over processes copies between devices of two processes: `copy` (a receive of
  /// its collectives, mesh/collective_receive.hpp's copy_across_processes), given the mesh.
  using CopyAcross = Ref<Step> (*)(MeshState& mesh, Step& src,
                                   const std::shared_ptr<DeviceState>& dst, std::int64_t from,
                                   std::int64_t to, std::string_view op);
  /// Set by the maker of a mesh over processes; none in one process. The mesh is held weakly:
  /// it owns its links.
  void attach(const std::shared_ptr<MeshState>& mesh, CopyAcross copy) {
    mesh_ = mesh;
    copy_ = copy;
  }
  Ref<Step> copy_across(Step& src, const std::shared_ptr<DeviceState>& dst, std::int64_t from,
                        std::int64_t to, std::string_view op) override {
    if (copy_ == nullptr) return {};
    const std::shared_ptr<MeshState> mesh = mesh_.lock();
    return mesh == nullptr ? Ref<Step>() : copy_(*mesh, src, dst, from, to, op);
  }

  /// Dimension-order routing: along axis 0 to the destination's coordinate, then axis 1, ...;
  /// along a ring the shorter way round (forward on a tie), along a line straight, through a
  /// switch in one hop.
  Duration carry(std::int64_t from, std::int64_t to, std::int64_t bytes, Duration ready,
                 std::string_view op) override {
    const MeshShape& shape = spec_.shape;
    std::vector<std::int64_t> at = shape.coordinate_of(from).indices();
    const std::vector<std::int64_t> goal = shape.coordinate_of(to).indices();
    std::vector<std::int64_t> path{from};
    std::vector<bool> switched;
    for (std::size_t a = 0; a < shape.rank(); ++a) {
      const std::int64_t n = shape.sizes()[a];
      while (at[a] != goal[a]) {
        if (spec_.topology[a] == Topology::fully_connected) {
          at[a] = goal[a];
        } else if (spec_.topology[a] == Topology::ring) {
          const std::int64_t forward = ((goal[a] - at[a]) % n + n) % n;
          at[a] = (at[a] + (2 * forward <= n ? 1 : n - 1)) % n;
        } else {
          at[a] += goal[a] > at[a] ? 1 : -1;
        }
        path.push_back(shape.index_of(MeshCoordinate(at)));
        switched.push_back(spec_.topology[a] == Topology::fully_connected);
      }
    }
    std::lock_guard lock(mutex);
    return links.carry(path, switched, bytes, ready, op);
  }

 private:
  const MeshSpec spec_;
  std::weak_ptr<MeshState> mesh_;
  CopyAcross copy_ = nullptr;

 public:
  std::mutex mutex;  // guards links
  LinkModel links;
};

struct MeshState {
  /// The devices of `s` on `executor`; with `remote`, a mesh whose devices other processes own
  /// too: those this process does not own are model-only stand-ins (they time the program and
  /// hold no values; the transport brings the values a local device needs). Each of `adopted`
  /// (a member and a device the program made, checked by the caller) is that member as it is,
  /// its arrays and name kept, instead of a new device.
  MeshState(MeshSpec s, const Executor& executor, bool model_only,
            std::shared_ptr<RemoteMesh> over = nullptr,
            const std::vector<std::pair<std::int64_t, Device>>& adopted = {})
      : spec(std::move(s)), net(std::make_shared<MeshNet>(spec)), remote(std::move(over)) {
    static std::atomic<std::uint64_t> count{0};
    const std::string mesh =
        spec.name + ":" + std::to_string(count.fetch_add(1, std::memory_order_relaxed));
    devices.reserve(spec.devices.size());
    for (std::size_t i = 0; i < spec.devices.size(); ++i) {
      const auto given = std::find_if(adopted.begin(), adopted.end(), [&](const auto& a) {
        return a.first == static_cast<std::int64_t>(i);
      });
      if (given != adopted.end()) {
        devices.push_back(given->second);
        DeviceAccess::state(devices.back())->join(net, static_cast<std::int64_t>(i));
        continue;
      }
      const std::string name =
          mesh + spec.shape.coordinate_of(static_cast<std::int64_t>(i)).to_string();
      devices.push_back(
          DeviceAccess::make(executor, make_device_model(spec.devices[i], name), name));
      DeviceAccess::state(devices.back())->join(net, static_cast<std::int64_t>(i));
      if (model_only) {
        DeviceAccess::state(devices.back())->set_model_only();
      } else if (remote != nullptr && !remote->local(static_cast<std::int64_t>(i))) {
        DeviceAccess::state(devices.back())->set_model_only(
            remote->not_here(static_cast<std::int64_t>(i)));
      }
    }
    groups.reserve(spec.shape.rank() + 1);
    for (int a = -1; a < static_cast<int>(spec.shape.rank()); ++a)
      groups.push_back(mesh_groups(spec, a, "Mesh"));
  }

  /// The groups of mesh axis `axis` (-1: the whole mesh), as mesh_groups makes them (and
  /// throwing as it does, as `op`, for an axis the mesh lacks): built once with the mesh, since
  /// a collective asks for them at every call.
  const std::vector<MeshGroup>& groups_of(int axis, std::string_view op) const {
    if (axis < -1 || axis >= static_cast<int>(spec.shape.rank())) mesh_groups(spec, axis, op);
    return groups[static_cast<std::size_t>(axis + 1)];
  }

  /// The device's simulator, under its lock.
  template <class F>
  static decltype(auto) with_simulator(const Device& d, F&& f) {
    return DeviceAccess::state(d)->with_observer([&](StepObserver& o) -> decltype(auto) {
      return f(static_cast<DeviceModel&>(o).simulator());
    });
  }

  const MeshSpec spec;
  std::shared_ptr<MeshNet> net;  // shared with the devices (weakly), which copy over it
  std::vector<Device> devices;
  Duration window_start{};
  /// The other processes of a mesh over processes (ferry::mpi::mesh_over); null for a mesh of
  /// this process alone.
  std::shared_ptr<RemoteMesh> remote;
  /// groups[a + 1]: mesh_groups(spec, a) for a = -1 (the whole mesh) and each axis.
  std::vector<std::vector<MeshGroup>> groups;

  /// plan_collective(c, topology, members, bytes, spec.link), made once for each distinct
  /// call: every group of an axis, and every call of a training step, plans the same.
  std::shared_ptr<const CollectivePlan> plan(Collective c, Topology topology,
                                             std::int64_t members, std::int64_t bytes) {
    const PlanKey key{c, topology, members, bytes};
    {
      std::lock_guard lock(plans_mutex_);
      for (const auto& [k, p] : plans_) {
        if (k == key) return p;
      }
    }
    auto made = std::make_shared<const CollectivePlan>(
        plan_collective(c, topology, members, bytes, spec.link));
    std::lock_guard lock(plans_mutex_);
    // A program has few distinct calls; one whose sizes keep changing starts over.
    if (plans_.size() >= kPlans) plans_.clear();
    plans_.emplace_back(key, made);
    return made;
  }

  /// The row-major position of the device `d`, or -1.
  std::int64_t member_of(const DeviceState* d) const noexcept {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (DeviceAccess::state(devices[i]).get() == d) return static_cast<std::int64_t>(i);
    }
    return -1;
  }

 private:
  struct PlanKey {
    Collective collective;
    Topology topology;
    std::int64_t members;
    std::int64_t bytes;
    bool operator==(const PlanKey&) const = default;
  };
  static constexpr std::size_t kPlans = 64;
  std::mutex plans_mutex_;
  std::vector<std::pair<PlanKey, std::shared_ptr<const CollectivePlan>>> plans_;
};

/// Sets `s.makespan` and `s.lower_bound` from `s.devices` (device i's window starting at
/// `starts[i]`) and `links`: from `start` to the last end of any device's work or any link's
/// message; the longest of the devices' lower bounds (each counted from the mesh's start) and
/// the links' busy times. Returns when the links were busy within the window (each message's
/// part past `start`), for the communication time. Mesh::stats() and mpi::mesh_stats() (with
/// the owners' figures) both end here. The caller holds the links' mutex.
inline std::vector<std::pair<Duration, Duration>> settle_window(
    MeshStats& s, const std::vector<Duration>& starts, Duration start, const LinkModel& links) {
  Duration end = start;
  s.lower_bound = Duration::zero();
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    end = std::max(end, starts[i] + s.devices[i].makespan);
    // A device's window may start before the mesh's, which starts where the last device's or
    // link's does (reset_stats): only the part of its bound past the mesh's start bounds the
    // mesh's makespan.
    s.lower_bound = std::max(s.lower_bound, starts[i] + s.devices[i].lower_bound - start);
  }
  // A link's messages bound it only past the mesh's start, as a device's work does: one the
  // links placed in a gap before it (data ready long before, or a member whose host reset
  // earlier) is the window's, whole in the link's own figures, but bounds nothing of the mesh.
  std::vector<Duration> busy_in_window(links.links().size());
  std::vector<std::pair<Duration, Duration>> busy;
  for (const auto& use : links.uses()) {
    end = std::max(end, use.end);
    if (use.end <= start) continue;
    busy.emplace_back(std::max(use.start, start), use.end);
    busy_in_window[use.link] += busy.back().second - busy.back().first;
  }
  for (const Duration b : busy_in_window) s.lower_bound = std::max(s.lower_bound, b);
  s.makespan = end - start;
  return busy;
}

}  // namespace detail

/// Devices on one interconnect, with one modeled clock. A handle: copies name the same mesh.
class Mesh {
 public:
  /// A mesh of modeled devices as `spec` describes, their kernels on `executor`. Throws
  /// InvalidArgument naming the first field of `spec` no mesh could have (detail::validate).
  static Mesh modeled(MeshSpec spec, Executor executor = Executor::shared()) {
    detail::validate(spec, "Mesh::modeled");
    return Mesh(std::make_shared<detail::MeshState>(std::move(spec), executor, false));
  }

  /// A mesh of model-only devices (see Device::modeled(spec, model_only)): the same timeline,
  /// no values, so a program far too large to compute can be modeled on many chips.
  static Mesh modeled(MeshSpec spec, ModelOnly, Executor executor = Executor::shared()) {
    detail::validate(spec, "Mesh::modeled");
    return Mesh(std::make_shared<detail::MeshState>(std::move(spec), executor, true));
  }

  const MeshSpec& spec() const noexcept { return state_->spec; }
  const MeshShape& shape() const noexcept { return state_->spec.shape; }
  /// The number of devices.
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(state_->devices.size()); }
  /// Every device, row-major (the order of MeshSpec::devices).
  const std::vector<Device>& devices() const noexcept { return state_->devices; }
  /// The device at `c`; InvalidArgument when `c` is not in the mesh's shape.
  Device device(const MeshCoordinate& c) const {
    return state_->devices[static_cast<std::size_t>(shape().index_of(c, "Mesh::device"))];
  }
  /// The device at row-major position `index`; InvalidArgument outside [0, size()).
  Device device(std::int64_t index) const {
    if (index < 0 || index >= size()) {
      detail::fail<InvalidArgument>("Mesh::device", "index ", index, " is outside mesh ",
                                    spec().name, " of ", size(), " devices");
    }
    return state_->devices[static_cast<std::size_t>(index)];
  }
  /// The row-major position of `d` in the mesh, or -1 when it is not one of its devices.
  std::int64_t index_of(const Device& d) const noexcept {
    const auto& all = state_->devices;
    const auto it = std::find(all.begin(), all.end(), d);
    return it == all.end() ? -1 : static_cast<std::int64_t>(it - all.begin());
  }
  /// The axis named `name` (MeshSpec::axis_names); InvalidArgument, as `op`, for a name the
  /// mesh does not have.
  int axis(std::string_view name, std::string_view op = "Mesh::axis") const {
    const auto& names = spec().axis_names;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return static_cast<int>(i);
    }
    detail::fail<InvalidArgument>(op, "mesh ", spec().name, " has no axis named '", name, "'",
                                  names.empty() ? " (its spec names none)" : "");
  }

  /// The figures of the window, for every device and link. Decides the schedule of everything
  /// submitted so far, as Device::stats() does.
  MeshStats stats() const {
    MeshStats s;
    std::vector<std::pair<Duration, Duration>> compute;  // when each device computed
    std::vector<Duration> device_starts;                 // each device's window, on the one clock
    for (const Device& d : state_->devices) {
      // One visit to each model for its figures, window and compute: what d.stats() would
      // give, without deciding and locking a second time.
      detail::MeshState::with_simulator(d, [&](detail::Simulator& sim) {
        s.devices.push_back(sim.stats());
        device_starts.push_back(sim.window_start());
        const auto busy = sim.compute_busy();
        compute.insert(compute.end(), busy.begin(), busy.end());
      });
      s.devices.back().cached_bytes = detail::DeviceAccess::state(d)->buffers().cached_bytes();
    }
    std::lock_guard lock(state_->net->mutex);
    const detail::LinkModel& links = state_->net->links;
    auto busy = detail::settle_window(s, device_starts, state_->window_start, links);
    for (const LinkStats& l : links.links()) {
      if (l.bytes != 0 || l.busy != Duration::zero()) s.links.push_back(l);
    }
    const auto comm = merged(std::move(busy));
    const auto comp = merged(std::move(compute));
    for (const auto& [a, b] : comm) s.communication_time += b - a;
    // Both lists are sorted and disjoint: walk them together.
    std::size_t j = 0;
    for (const auto& [a, b] : comm) {
      while (j < comp.size() && comp[j].second <= a) ++j;
      for (std::size_t k = j; k < comp.size() && comp[k].first < b; ++k) {
        s.communication_overlap += std::min(b, comp[k].second) - std::max(a, comp[k].first);
      }
    }
    return s;
  }

  /// Starts a new window for stats() and the trace on every device and link. Each device's
  /// starts at its own host clock (each chip has one, moved by its launches and the waits on
  /// it: a host thread a chip, as a mesh over processes has), the mesh's where the latest
  /// starts: in a loop of steps that each wait on every chip, a step's makespan is the period.
  void reset_stats() {
    Duration at{};
    for (Device& d : state_->devices) {
      d.reset_stats();
      at = std::max(at, detail::MeshState::with_simulator(
                            d, [](detail::Simulator& sim) { return sim.window_start(); }));
    }
    std::lock_guard lock(state_->net->mutex);
    at = std::max(at, state_->net->links.last_end());
    state_->net->links.reset(at);
    state_->window_start = at;
  }

  /// Writes one Chrome trace of the window (ui.perfetto.dev): a process per device with its
  /// tracks, as Device::write_trace writes them, named as member_label says, and a process
  /// "links" with one track per link and direction, a slice per message named after its
  /// collective. Throws ferry::Error when the file cannot be written.
  void write_trace(const std::string& path) const {
    std::string out = "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"mesh\":";
    detail::append_json_string(out, spec().name);
    out += "},\"traceEvents\":[\n";
    std::uint64_t flow = 0;
    for (std::size_t i = 0; i < state_->devices.size(); ++i) {
      const Device& d = state_->devices[i];
      if (i != 0) out += ",\n";
      flow = detail::MeshState::with_simulator(d, [&](detail::Simulator& sim) {
        return sim.append_trace_events(out, member_label(i), static_cast<int>(i) + 1, flow);
      });
    }
    const std::string pid = std::to_string(state_->devices.size() + 1);
    {
      std::lock_guard lock(state_->net->mutex);
      const detail::LinkModel& links = state_->net->links;
      out += ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid +
             ",\"args\":{\"name\":\"links\"}}";
      for (std::size_t l = 0; l < links.links().size(); ++l) {
        out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid +
               ",\"tid\":" + std::to_string(l) + ",\"args\":{\"name\":";
        detail::append_json_string(out, links.links()[l].name);
        out += "}}";
      }
      for (const auto& use : links.uses()) {
        out += ",\n{\"name\":";
        detail::append_json_string(out, use.op);
        out += ",\"cat\":\"link\",\"ph\":\"X\",\"pid\":" + pid +
               ",\"tid\":" + std::to_string(use.link) + ",\"ts\":";
        detail::Timeline::append_us(out, use.start);
        out += ",\"dur\":";
        detail::Timeline::append_us(out, use.end - use.start);
        out += ",\"args\":{\"bytes\":" + std::to_string(use.bytes) + "}}";
      }
    }
    out += "\n]}\n";
    detail::write_file("Mesh::write_trace", path, out);
  }

  /// Each device's timeline_text() (named as member_label says), then a line per link with
  /// its busy time and bytes.
  std::string timeline_text() const {
    std::string out;
    for (std::size_t i = 0; i < state_->devices.size(); ++i)
      out += member_label(i) + ": " + state_->devices[i].timeline_text();
    const MeshStats s = stats();
    out += "mesh " + spec().name + ": makespan " + std::to_string(s.makespan.count()) +
           " ns, communication " + std::to_string(s.communication_time.count()) +
           " ns, of which hidden by compute " + std::to_string(s.communication_overlap.count()) +
           " ns\n";
    for (const LinkStats& l : s.links) {
      out += l.name + ": busy " + std::to_string(l.busy.count()) + " ns, " +
             std::to_string(l.bytes) + " bytes\n";
    }
    return out;
  }

  friend bool operator==(const Mesh& a, const Mesh& b) noexcept { return a.state_ == b.state_; }

 private:
  friend struct detail::MeshAccess;
  explicit Mesh(std::shared_ptr<detail::MeshState> state) : state_(std::move(state)) {}

  /// Member i as the trace and timeline_text name it: the spec's name and its coordinate
  /// ("t3000(0, 3)"). Not the device's name(), which counts the meshes the process made
  /// before (names must be unique): one program on one spec writes the same bytes, computing
  /// or model-only, whatever ran before it.
  std::string member_label(std::size_t i) const {
    return spec().name + spec().shape.coordinate_of(static_cast<std::int64_t>(i)).to_string();
  }

  /// Sorted, overlapping intervals joined.
  static std::vector<std::pair<Duration, Duration>> merged(
      std::vector<std::pair<Duration, Duration>> v) {
    // By start alone: the union is the same whatever the order of equal starts, and one integer
    // compared is a third of what a pair's three-way compare of two durations cost (a step's
    // link messages, tens of thousands, were most of stats()).
    std::sort(v.begin(), v.end(), [](const std::pair<Duration, Duration>& a,
                                     const std::pair<Duration, Duration>& b) {
      return a.first.count() < b.first.count();
    });
    std::vector<std::pair<Duration, Duration>> out;
    for (const auto& iv : v) {
      if (!out.empty() && iv.first <= out.back().second) {
        out.back().second = std::max(out.back().second, iv.second);
      } else {
        out.push_back(iv);
      }
    }
    return out;
  }

  std::shared_ptr<detail::MeshState> state_;
};

namespace detail {
/// The state behind a Mesh handle, for the collectives.
struct MeshAccess {
  static MeshState& state(const Mesh& m) noexcept { return *m.state_; }
  static const std::shared_ptr<MeshState>& handle(const Mesh& m) noexcept { return m.state_; }
  static Mesh wrap(std::shared_ptr<MeshState> s) noexcept { return Mesh(std::move(s)); }
};
}  // namespace detail

}  // namespace ferry
