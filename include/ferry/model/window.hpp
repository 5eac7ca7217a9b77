#pragma once
// StatsWindow: the figures the simulator gathers while it places commands, for the work since
// the device was made or its stats were last reset, and the DeviceStats they make.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/horizon.hpp"
#include "ferry/model/memory.hpp"
#include "ferry/model/stats.hpp"

namespace ferry::detail {

class StatsWindow {
 public:
  /// Engines 0-2 are the copy engines, the rest compute units.
  explicit StatsWindow(std::size_t engines) : busy_(engines, Duration::zero()) {}

  /// Which window this is: commands remember the one they were submitted in.
  std::uint32_t index() const noexcept { return index_; }
  Duration start() const noexcept { return start_; }
  Duration last_end() const noexcept { return last_end_; }

  /// A chain of durations ending at a command of this window.
  void path(Duration length) noexcept { critical_path_ = std::max(critical_path_, length); }

  /// Modeled time passes from `from` to `to` with the engines as they are.
  void time_passes(Duration from, Duration to) noexcept {
    if (copy_running_ > 0 && compute_running_ > 0) overlap_ += to - from;
  }

  /// A command of class `klass` starts, moving `bytes` if it is a copy.
  void started(EngineClass klass, std::uint64_t bytes) noexcept {
    ++steps_;
    switch (klass) {
      case EngineClass::h2d: bytes_h2d_ += bytes; break;
      case EngineClass::d2h: bytes_d2h_ += bytes; break;
      case EngineClass::d2d: bytes_d2d_ += bytes; break;
      default: break;
    }
    ++(klass == EngineClass::compute ? compute_running_ : copy_running_);
  }

  /// What a command that starts needs at the least, whatever else runs: its copy engine for
  /// its solo `duration`; or unit time for its latency and its tiles, and its pool's bytes.
  void least_work(EngineClass klass, const KernelPlan& plan, Duration duration) noexcept {
    if (klass != EngineClass::compute) {
      least_copy_[static_cast<std::size_t>(klass)] += duration;
    } else if (plan.is_fixed()) {
      least_unit_ns_ += static_cast<double>(duration.count());
    } else {
      least_unit_ns_ += static_cast<double>(plan.latency.count()) +
                        static_cast<double>(plan.tiles) * plan.tile_ns;
    }
    if (plan.pool != Pool::none)
      least_bytes_[static_cast<std::size_t>(plan.pool)] += plan.shared_bytes;
  }

  /// A command of class `klass` leaves `engine`, which it kept `busy`, holding `units` units
  /// at the end, but not `unheld` of that unit time (units it got on the way).
  void left_engine(EngineClass klass, int engine, Duration busy, std::int64_t units,
                   Duration unheld) noexcept {
    busy_[static_cast<std::size_t>(engine)] += busy;
    // Units x time passes a Duration long before time does (65,536 units x 2^62 ns): held.
    unit_time_ = held_sum(unit_time_, Duration(held_product(busy.count(), units)) - unheld);
    --(klass == EngineClass::compute ? compute_running_ : copy_running_);
  }

  /// A kernel kept a compute unit busy over [start, end]; `end` is never before an earlier
  /// call's. Kept as disjoint intervals, merged as they come (the completions arrive in time
  /// order, so only the last ones can overlap): a mesh intersects them with its links' busy
  /// time, whatever the trace keeps.
  void compute_busy(Duration start, Duration end) {
    start = std::max(start, start_);
    if (end <= start) return;
    while (!computing_.empty() && computing_.back().second >= start) {
      start = std::min(start, computing_.back().first);
      end = std::max(end, computing_.back().second);
      computing_.pop_back();
    }
    computing_.emplace_back(start, end);
  }
  /// The window's compute-busy intervals, sorted and disjoint.
  const std::vector<std::pair<Duration, Duration>>& computing() const noexcept {
    return computing_;
  }

  /// A command of this window could end no earlier than `t` (its release, its inputs, its
  /// solo duration): the host's submissions count in the lower bound.
  void earliest_end(Duration t) noexcept { earliest_end_ = std::max(earliest_end_, t); }

  /// A command submitted in window `window` completes at `now`.
  void completed(std::uint32_t window, Duration now) noexcept {
    if (window == index_) last_end_ = std::max(last_end_, now);
  }

  /// The host waited `stall` in one export.
  void host_sync(Duration stall) noexcept {
    host_stall_ += stall;
    ++host_syncs_;
  }

  /// What placing a command moved: buffers spilled, and whether it took over its donor's.
  void placed(std::size_t spills, bool donated) noexcept {
    spills_ += spills;
    donations_ += donated ? 1 : 0;
  }

  /// An injected fault hit a command.
  void fault() noexcept { ++faults_; }
  /// A rejected command ran on the host.
  void fell_back() noexcept {
    ++fallbacks_;
    paths_too_long_ = true;
  }
  /// Commands counted in the critical path with their device durations did not run on the
  /// device (they ran on the host, or nothing could read them and they were dropped).
  void paths_too_long() noexcept { paths_too_long_ = true; }

  /// The figures, with the engines named by `tracks` (track 0 is the host).
  DeviceStats report(const std::vector<std::string>& tracks, const DeviceSpec& spec,
                     const DeviceMemory& memory) const {
    DeviceStats s;
    s.makespan = last_end_ - start_;
    s.critical_path = critical_path_;
    s.overlap = overlap_;
    s.host_stall = host_stall_;
    s.bytes_h2d = bytes_h2d_;
    s.bytes_d2h = bytes_d2h_;
    s.bytes_d2d = bytes_d2d_;
    s.host_syncs = host_syncs_;
    s.steps = steps_;
    s.peak_dram_bytes = memory.peak_dram();
    s.peak_l1_bytes = memory.peak_l1();
    s.spills = spills_;
    s.donations = donations_;
    s.faults = faults_;
    s.fallbacks = fallbacks_;
    s.dram_bytes_in_use = memory.dram_used();
    s.l1_bytes_in_use = memory.l1_used();
    s.unit_time = unit_time_;
    for (std::size_t e = 0; e < busy_.size(); ++e) s.engines.push_back({tracks[e + 1], busy_[e]});
    // No schedule beats: the host's releases and the chains; each copy engine's load; the
    // units' least work spread over all of them; each memory pool's bytes at its capacity.
    const auto floor_ns = [](double ns) {
      return Duration(static_cast<Duration::rep>(ns * (1 + 1e-12)));
    };
    const Duration units = floor_ns(least_unit_ns_ / static_cast<double>(spec.compute_units));
    const std::array<double, kPools> capacity = pool_capacity(spec);
    Duration pools{};
    for (std::size_t p = 0; p < kPools; ++p) {
      if (capacity[p] > 0) pools = std::max(pools, floor_ns(least_bytes_[p] / capacity[p]));
    }
    s.lower_bound = std::max({critical_path_, earliest_end_ - start_, least_copy_[0],
                              least_copy_[1], least_copy_[2], units, pools});
    if (paths_too_long_) s.lower_bound = std::min(s.lower_bound, s.makespan);
    return s;
  }

  /// A new window from `start`. What is running keeps running: the engine counts stay.
  void reset(Duration start) noexcept {
    ++index_;
    start_ = last_end_ = start;
    critical_path_ = overlap_ = host_stall_ = unit_time_ = Duration::zero();
    earliest_end_ = start;
    least_copy_ = {};
    least_bytes_ = {};
    least_unit_ns_ = 0;
    std::fill(busy_.begin(), busy_.end(), Duration::zero());
    bytes_h2d_ = bytes_d2h_ = bytes_d2d_ = host_syncs_ = steps_ = spills_ = donations_ = 0;
    faults_ = fallbacks_ = 0;
    paths_too_long_ = false;
    computing_.clear();
  }

 private:
  std::uint32_t index_ = 0;
  Duration start_{};
  Duration last_end_{};
  Duration critical_path_{};
  Duration overlap_{};
  Duration host_stall_{};
  std::vector<Duration> busy_;  // per engine (copy engines, then compute lanes)
  std::vector<std::pair<Duration, Duration>> computing_;  // see compute_busy
  Duration unit_time_{};        // units held x time, summed over kernels
  Duration earliest_end_{};
  std::array<Duration, 3> least_copy_{};
  std::array<double, kPools> least_bytes_{};
  double least_unit_ns_ = 0;
  int copy_running_ = 0;
  int compute_running_ = 0;
  std::uint64_t bytes_h2d_ = 0;
  std::uint64_t bytes_d2h_ = 0;
  std::uint64_t bytes_d2d_ = 0;
  std::uint64_t host_syncs_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t spills_ = 0;
  std::uint64_t donations_ = 0;
  std::uint64_t faults_ = 0;
  std::uint64_t fallbacks_ = 0;
  bool paths_too_long_ = false;
};

}  // namespace ferry::detail
