#pragma once
// ferry::mpi::mesh_stats: the stats of a mesh over processes with every device's figures taken
// from the process that owns it; and ferry::mpi::traffic, the messages its process moved.
//
// Every process models every device of the mesh: its own, and the others as model-only
// stand-ins that run the same program, so each process places every collective on the links
// with the same ready times and its own devices get the timeline the one-process mesh gives
// them. What a stand-in cannot see is what its owner does alone: an export (to_host, a read of
// a local shard) moves the modeled host of the owner's device only. A stand-in's timeline then
// lacks that wait, and Mesh::stats() on a process, which reads the stand-ins too, is not the
// one-process mesh's figure. mesh_stats() asks each process for its own devices' figures
// instead (one MPI all-gather), so that every rank gets the mesh's makespan the one-process mesh
// would print for the program the ranks run together.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/distributed/mesh_over.hpp"
#include "ferry/distributed/mesh_traffic.hpp"
#include "ferry/distributed/mpi_error.hpp"
#include "ferry/distributed/transport.hpp"
#include "ferry/distributed/world.hpp"
#include "ferry/distributed/world_calls.hpp"
#include "ferry/mesh/mesh.hpp"

namespace ferry::mpi {

/// mesh.stats() as the one-process mesh of the same program gives it: each device's makespan,
/// lower_bound, critical_path, overlap, host_stall, unit_time, steps and host_syncs (and its
/// window's start) come from the process that owns the device; the mesh's makespan and
/// lower_bound are computed again from them and from the links (which every process models
/// alike). The devices' other figures (engines, bytes, memory) are this process's view, a
/// stand-in's for a device it does not own. On a mesh of this process alone, mesh.stats().
/// Every process of the mesh must call it, in the same order relative to its other collective
/// calls on `world` (mesh_over, mesh_stats); PeerTimeout when one does not within the world's
/// collective_timeout, CommunicationError when MPI fails.
inline MeshStats mesh_stats(const World& world, const Mesh& mesh) {
  constexpr std::string_view op = "mpi::mesh_stats";
  detail::MeshState& state = detail::MeshAccess::state(mesh);
  MeshStats s = mesh.stats();
  if (state.remote == nullptr) return s;
  // Per device: whether this process owns it, its window's start, then the figures it sends.
  constexpr std::size_t k = 10;
  const std::size_t n = state.devices.size();
  std::vector<std::int64_t> mine(n * k, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (!state.remote->local(static_cast<std::int64_t>(i))) continue;
    const DeviceStats& d = s.devices[i];
    const Duration start = detail::MeshState::with_simulator(
        state.devices[i], [](detail::Simulator& sim) { return sim.window_start(); });
    const std::int64_t row[k] = {1,
                                 start.count(),
                                 d.makespan.count(),
                                 d.lower_bound.count(),
                                 d.critical_path.count(),
                                 d.overlap.count(),
                                 d.host_stall.count(),
                                 d.unit_time.count(),
                                 static_cast<std::int64_t>(d.steps),
                                 static_cast<std::int64_t>(d.host_syncs)};
    std::copy(row, row + k, mine.begin() + static_cast<std::ptrdiff_t>(i * k));
  }
  const int count =
      detail::mpi_count(mine.size() * sizeof(std::int64_t), op, "the devices' figures");
  detail::WorldCalls& calls = world.calls();
  calls.check(op);
  const std::vector<std::int64_t> all =
      detail::mpi_gather_all(calls, world.communicator(), world.size(), mine, count,
                             world.collective_timeout(), op, "gathering the devices' figures");
  Duration start = state.window_start;
  std::vector<Duration> starts(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Each owner marks its devices' rows: a row left unmarked means the ranks' calls did not
    // pair (a rank making another call where MPI did not say so).
    const auto p = static_cast<std::size_t>(state.remote->owner(static_cast<std::int64_t>(i)));
    const std::int64_t* row = all.data() + p * n * k + i * k;
    if (row[0] != 1) {
      calls.give_up(std::make_exception_ptr(CommunicationError(detail::message(
          op, "rank ", p, " sent no figures for device ", i,
          ", which it owns: its call did not pair with this rank's (did it make another call on "
          "the world?)"))));
    }
    DeviceStats& d = s.devices[i];
    starts[i] = Duration(row[1]);
    d.makespan = Duration(row[2]);
    d.lower_bound = Duration(row[3]);
    d.critical_path = Duration(row[4]);
    d.overlap = Duration(row[5]);
    d.host_stall = Duration(row[6]);
    d.unit_time = Duration(row[7]);
    d.steps = static_cast<std::uint64_t>(row[8]);
    d.host_syncs = static_cast<std::uint64_t>(row[9]);
    start = std::max(start, starts[i]);
  }
  std::lock_guard lock(state.net->mutex);
  detail::settle_window(s, starts, start, state.net->links);
  return s;
}

/// The data messages this process sent and received for `mesh` since it was made (zeros for a
/// mesh of this process alone): a message crosses to a process once however many of its
/// devices need it.
inline MeshTraffic traffic(const Mesh& mesh) {
  detail::MeshState& state = detail::MeshAccess::state(mesh);
  auto* transport = dynamic_cast<detail::MpiTransport*>(state.remote.get());
  return transport != nullptr ? transport->traffic() : MeshTraffic{};
}

}  // namespace ferry::mpi
