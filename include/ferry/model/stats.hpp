#pragma once
// DeviceStats: what the model says about the work a device did since its stats were reset.

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/core/cost.hpp"

namespace ferry {

/// One engine of a modeled device and how long it was busy.
struct EngineStats {
  std::string name;  // "h2d", "d2h", "d2d", "compute 0", "compute 1", ...
  Duration busy{};
};

/// Modeled figures for the work submitted since the device was made or its stats were reset.
struct DeviceStats {
  /// From the start of the window to the end of the last command.
  Duration makespan{};
  /// No schedule could be shorter: the largest of the critical path, the earliest the last
  /// command could end after the host released it (the host's launch overhead counts), each
  /// copy engine's load, the kernels' least unit time spread over every unit, and each memory
  /// pool's bytes at its full bandwidth, over the commands that ran (a failed one counts in
  /// neither this nor the makespan). (At most the makespan when steps ran on the host or were
  /// dropped: their device durations are in the paths.)
  Duration lower_bound{};
  /// The longest chain of dependent commands, by their durations.
  Duration critical_path{};
  /// Time during which a copy engine and a compute unit were both busy.
  Duration overlap{};
  /// Time the modeled host spent waiting in exports, within the window (a wait that began
  /// before reset_stats counts from the window's start).
  Duration host_stall{};
  /// The copy engines, then one lane per kernel that ran alongside others ("compute 0", ...):
  /// a kernel spread over many units is one lane.
  std::vector<EngineStats> engines;
  /// Compute units held, times how long: what the kernels used of the device's units.
  Duration unit_time{};
  std::uint64_t bytes_h2d = 0;
  std::uint64_t bytes_d2h = 0;
  std::uint64_t bytes_d2d = 0;
  /// Exports (each batched export or wait counts once).
  std::uint64_t host_syncs = 0;
  /// Commands that ran on an engine (views, which take no engine, are not counted).
  std::uint64_t steps = 0;
  std::uint64_t peak_dram_bytes = 0;
  std::uint64_t peak_l1_bytes = 0;
  /// L1 buffers moved to DRAM to make room for a step that needed L1.
  std::uint64_t spills = 0;
  /// Steps whose output took over an input's buffer instead of allocating (see donation).
  std::uint64_t donations = 0;
  /// Injected faults that hit a step the device was about to run (see FaultPlan).
  std::uint64_t faults = 0;
  /// Steps the device rejected (a fault, memory it can never get) that ran on the host instead
  /// (Fallback::host). They take no engine and no device memory, so `steps` leaves them out.
  std::uint64_t fallbacks = 0;
  /// Device memory held now, by arrays still alive or still read: after every handle is gone
  /// and every export done, both are back to where they were.
  std::uint64_t dram_bytes_in_use = 0;
  std::uint64_t l1_bytes_in_use = 0;
  /// Real host memory the device keeps for reuse now: freed buffers waiting in its cache (see
  /// Device::trim). Not device memory, and not in any figure above; filled by Device::stats().
  std::uint64_t cached_bytes = 0;

  /// lower_bound / makespan: 1 is a perfect schedule. 1 for an empty window.
  double efficiency() const {
    return makespan.count() == 0 ? 1.0
                                 : static_cast<double>(lower_bound.count()) /
                                       static_cast<double>(makespan.count());
  }

  /// The busy time of the engine called `name` (zero if there is none).
  Duration busy(const std::string& name) const {
    for (const EngineStats& e : engines) {
      if (e.name == name) return e.busy;
    }
    return Duration::zero();
  }
};

}  // namespace ferry
