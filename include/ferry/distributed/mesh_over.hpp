#pragma once
// ferry::mpi::mesh_over: a ferry::Mesh whose devices live in the processes of a World. Every
// process builds the whole mesh: the devices it owns compute, the others are model-only
// stand-ins that hold no values (so every process can run the same program, shard for shard),
// and the mesh's transport (distributed/transport.hpp) moves, inside each collective, the data
// that one process's devices need from another's. Every API of the mesh works on it as on a
// mesh of one process; the collectives and to_host of a global array cross processes (see
// docs/distributed.md for what does not yet).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/device.hpp"
#include "ferry/distributed/adopt.hpp"
#include "ferry/distributed/fingerprint.hpp"
#include "ferry/distributed/mpi_error.hpp"
#include "ferry/distributed/transport.hpp"
#include "ferry/distributed/world.hpp"
#include "ferry/executor.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry::detail {

/// Waits for the non-blocking collective `r` (made as `op`) until `timeout`: PeerTimeout when
/// some process never joins it (it is then left to MPI: a collective cannot be cancelled).
inline void mpi_await(MPI_Request& r, std::chrono::nanoseconds timeout, std::string_view op,
                      std::string_view what) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int flag = 0;
    mpi_check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), op, "MPI_Test");
    if (flag != 0) return;
    if (std::chrono::steady_clock::now() >= until) {
      fail<PeerTimeout>(
          op, what, ": not every rank joined within ",
          std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count(),
          " ms (the world's collective_timeout)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// A duplicate of `comm` (every rank must ask), waited for with `timeout`.
inline MPI_Comm mpi_duplicate(MPI_Comm comm, std::chrono::nanoseconds timeout, std::string_view op) {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Request r = MPI_REQUEST_NULL;
  mpi_check(MPI_Comm_idup(comm, &out, &r), op, "MPI_Comm_idup");
  mpi_await(r, timeout, op, "creating the mesh's communicators");
  return out;
}

}  // namespace ferry::detail

namespace ferry::mpi {

/// The members (row-major device positions) that rank `rank` of `ranks` owns by default: an
/// even split in row-major order, the first `devices % ranks` ranks one more.
inline std::vector<std::int64_t> default_members(std::int64_t devices, int rank, int ranks) {
  const std::int64_t n = ranks;
  const std::int64_t base = devices / n;
  const std::int64_t extra = devices % n;
  const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
  const std::int64_t count = base + (rank < extra ? 1 : 0);
  std::vector<std::int64_t> out;
  for (std::int64_t m = begin; m < begin + count; ++m) out.push_back(m);
  return out;
}

}  // namespace ferry::mpi

namespace ferry::detail {

/// mesh_over, with the members of `adopted` (checked by check_adopted) being the program's
/// devices rather than new ones.
inline Mesh mesh_over_with(const mpi::World& world, MeshSpec spec,
                           const std::vector<std::int64_t>& local_members,
                           const std::vector<std::pair<std::int64_t, Device>>& adopted,
                           const Executor& executor) {
  constexpr std::string_view op = "mesh_over";
  const std::int64_t n = static_cast<std::int64_t>(spec.devices.size());
  // What every process says: a hash of its spec's name and shape, a hash of each device's spec
  // (each process models every device, so they must agree; a fault plan is its owner's alone,
  // see spec_fields), then
  // one byte per device (1: mine).
  const std::string text = spec.name + " " + spec.shape.to_string() + " " + std::to_string(n);
  const std::size_t owned = 8 * (1 + static_cast<std::size_t>(n));  // where the owned bytes start
  std::vector<unsigned char> mine(owned + static_cast<std::size_t>(n), 0);
  const auto put = [&](std::size_t at, std::uint64_t hash) {
    for (std::size_t b = 0; b < 8; ++b) mine[at + b] = static_cast<unsigned char>(hash >> (8 * b));
  };
  put(0, ferry::detail::fingerprint_hash(text));
  for (std::size_t m = 0; m < spec.devices.size(); ++m) {
    std::string fields;
    for (const auto& [name, value] : ferry::detail::spec_fields(spec.devices[m])) {
      fields += name + "=" + value + ";";
    }
    put(8 * (1 + m), ferry::detail::fingerprint_hash(fields));
  }
  for (std::int64_t m : local_members) {
    if (m < 0 || m >= n) {
      ferry::detail::fail<InvalidArgument>(op, "member ", m, " is outside mesh ", spec.name,
                                           " of ", n, " devices");
    }
    mine[owned + static_cast<std::size_t>(m)] = 1;
  }
  // Checked before any MPI call, so that every rank fails alike rather than some waiting.
  const int count = ferry::detail::mpi_count(mine.size(), op, "exchanging the devices each rank owns");
  const auto timeout = world.collective_timeout();
  MPI_Comm ctrl = ferry::detail::mpi_duplicate(world.communicator(), timeout, op);
  MPI_Comm data = ferry::detail::mpi_duplicate(world.communicator(), timeout, op);
  const int ranks = world.size();
  std::vector<unsigned char> all(mine.size() * static_cast<std::size_t>(ranks));
  MPI_Request r = MPI_REQUEST_NULL;
  try {
    ferry::detail::mpi_check(MPI_Iallgather(mine.data(), count, MPI_BYTE, all.data(), count,
                                            MPI_BYTE, ctrl, &r),
                             op, "MPI_Iallgather");
    ferry::detail::mpi_await(r, timeout, op, "exchanging the devices each rank owns");
  } catch (...) {
    MPI_Comm_free(&ctrl);
    MPI_Comm_free(&data);
    throw;
  }
  std::vector<int> owner(static_cast<std::size_t>(n), -1);
  std::string problem;
  for (int p = 0; p < ranks && problem.empty(); ++p) {
    const unsigned char* theirs = all.data() + mine.size() * static_cast<std::size_t>(p);
    if (std::memcmp(theirs, mine.data(), 8) != 0) {
      MPI_Comm_free(&ctrl);
      MPI_Comm_free(&data);
      ferry::detail::fail<CollectiveMismatch>(op, "rank ", p, " made a mesh other than ", text,
                                              " that rank ", world.rank(), " made");
    }
    for (std::int64_t m = 0; m < n; ++m) {
      const std::size_t at = 8 * (1 + static_cast<std::size_t>(m));
      if (std::memcmp(theirs + at, mine.data() + at, 8) == 0) continue;
      MPI_Comm_free(&ctrl);
      MPI_Comm_free(&data);
      ferry::detail::fail<CollectiveMismatch>(
          op, "rank ", p, " describes device ", m, " of mesh ", spec.name, " otherwise than rank ",
          world.rank(), " (", spec.devices[static_cast<std::size_t>(m)].name,
          "): the ranks would model different devices");
    }
    for (std::int64_t m = 0; m < n; ++m) {
      if (theirs[owned + static_cast<std::size_t>(m)] == 0) continue;
      int& o = owner[static_cast<std::size_t>(m)];
      if (o >= 0) {
        problem = "device " + std::to_string(m) + " is owned by ranks " + std::to_string(o) +
                  " and " + std::to_string(p);
      }
      o = p;
    }
  }
  for (std::int64_t m = 0; m < n && problem.empty(); ++m) {
    if (owner[static_cast<std::size_t>(m)] < 0) problem = "no rank owns device " + std::to_string(m);
  }
  if (!problem.empty()) {
    MPI_Comm_free(&ctrl);
    MPI_Comm_free(&data);
    ferry::detail::fail<InvalidArgument>(op, "mesh ", spec.name, ": ", problem);
  }
  auto transport = std::make_shared<ferry::detail::MpiTransport>(world.progress(), ctrl, data,
                                                                 std::move(owner), spec.name);
  world.progress()->add(transport);
  return ferry::detail::MeshAccess::wrap(std::make_shared<ferry::detail::MeshState>(
      std::move(spec), executor, false, transport, adopted));
}

}  // namespace ferry::detail

namespace ferry::mpi {

/// A mesh as `spec` describes, over the processes of `world`: this process owns the devices at
/// the row-major positions `local_members` (their kernels run on `executor`), the others are
/// owned by the other processes, each of which makes the same call with its own members. Every
/// process must call it, in the same order relative to its other collective work. Throws
/// InvalidArgument for an invalid spec or members out of range (at the call, on this process),
/// and, on every process, InvalidArgument for a device that no process or two processes own
/// (naming it and them), CollectiveMismatch when the processes' specs differ (shape, device
/// count, name, or any field of a device's spec except its fault plan, naming the device),
/// PeerTimeout when some process does not join within the world's
/// collective_timeout, CommunicationError when MPI fails.
inline Mesh mesh_over(const World& world, MeshSpec spec, const std::vector<std::int64_t>& local_members,
                      Executor executor = Executor::shared()) {
  ferry::detail::validate(spec);
  return ferry::detail::mesh_over_with(world, std::move(spec), local_members, {}, executor);
}

/// mesh_over(world, spec, local_members), where this process's members are the devices the
/// program made, `local_devices[k]` for member `local_members[k]`, as they are: arrays already
/// on them stay valid and take part in the mesh's collectives, and the mesh's collectives run
/// on them. The other members are stand-ins (on the executor of the first local device), each
/// made from its entry of `spec`, so a device must be one such a stand-in models exactly.
/// Throws, at the call and on this process before any MPI call, InvalidArgument naming the
/// values for an invalid spec, a member out of range or given twice, a device count other than
/// the members', a device given twice, a model-only device, a device already in a mesh that is
/// still alive, or a device whose spec differs from `spec`'s entry for its member in any field
/// except the fault plan; then what mesh_over(world, spec, local_members) throws. No other thread may use the
/// devices during the call.
inline Mesh mesh_over(const World& world, MeshSpec spec, const std::vector<std::int64_t>& local_members,
                      const std::vector<Device>& local_devices) {
  constexpr std::string_view op = "mesh_over";
  ferry::detail::validate(spec);
  const auto adopted =
      ferry::detail::check_adopted(op, world.rank(), spec, local_members, local_devices);
  const Executor executor = local_devices.empty() ? Executor::shared() : local_devices.front().executor();
  return ferry::detail::mesh_over_with(world, std::move(spec), local_members, adopted, executor);
}

/// mesh_over(world, spec, default_members(devices, world.rank(), world.size()), local_devices):
/// this process's devices for the members the default split gives it, in row-major order.
inline Mesh mesh_over(const World& world, MeshSpec spec, const std::vector<Device>& local_devices) {
  std::vector<std::int64_t> members = default_members(
      static_cast<std::int64_t>(spec.devices.size()), world.rank(), world.size());
  return mesh_over(world, std::move(spec), members, local_devices);
}

/// mesh_over(world, spec, default_members(devices, world.rank(), world.size()), executor): the
/// devices split evenly over the ranks in row-major order.
inline Mesh mesh_over(const World& world, MeshSpec spec, Executor executor = Executor::shared()) {
  std::vector<std::int64_t> members = default_members(
      static_cast<std::int64_t>(spec.devices.size()), world.rank(), world.size());
  return mesh_over(world, std::move(spec), members, std::move(executor));
}

}  // namespace ferry::mpi
