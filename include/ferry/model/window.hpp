#pragma once
// StatsWindow: the figures the simulator gathers while it places commands, for the work since
// the device was made or its stats were last reset, and the DeviceStats they make.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/model/command.hpp"
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

  /// A command of class `klass` starts on `engine`, keeping it busy for `busy`, moving
  /// `bytes` if it is a copy.
  void started(EngineClass klass, int engine, Duration busy, std::uint64_t bytes) noexcept {
    busy_[static_cast<std::size_t>(engine)] += busy;
    ++steps_;
    switch (klass) {
      case EngineClass::h2d: bytes_h2d_ += bytes; break;
      case EngineClass::d2h: bytes_d2h_ += bytes; break;
      case EngineClass::d2d: bytes_d2d_ += bytes; break;
      default: break;
    }
    ++(klass == EngineClass::compute ? compute_running_ : copy_running_);
  }

  /// A command of class `klass` leaves its engine at `now`.
  void left_engine(EngineClass klass) noexcept {
    --(klass == EngineClass::compute ? compute_running_ : copy_running_);
  }

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
  DeviceStats report(const std::vector<std::string>& tracks, std::int64_t compute_units,
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
    Duration compute{};
    for (std::size_t e = 0; e < busy_.size(); ++e) {
      s.engines.push_back({tracks[e + 1], busy_[e]});
      if (e >= 3) compute += busy_[e];
    }
    const auto units = static_cast<Duration::rep>(compute_units);
    const Duration compute_share((compute.count() + units - 1) / units);
    s.lower_bound = std::max({critical_path_, busy_[0], busy_[1], busy_[2], compute_share});
    if (paths_too_long_) s.lower_bound = std::min(s.lower_bound, s.makespan);
    return s;
  }

  /// A new window from `start`. What is running keeps running: the engine counts stay.
  void reset(Duration start) noexcept {
    ++index_;
    start_ = last_end_ = start;
    critical_path_ = overlap_ = host_stall_ = Duration::zero();
    std::fill(busy_.begin(), busy_.end(), Duration::zero());
    bytes_h2d_ = bytes_d2h_ = bytes_d2d_ = host_syncs_ = steps_ = spills_ = donations_ = 0;
    faults_ = fallbacks_ = 0;
    paths_too_long_ = false;
  }

 private:
  std::uint32_t index_ = 0;
  Duration start_{};
  Duration last_end_{};
  Duration critical_path_{};
  Duration overlap_{};
  Duration host_stall_{};
  std::vector<Duration> busy_;  // per engine
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
