#pragma once
// ferry::mpi::mesh_over: a ferry::Mesh whose devices live in the processes of a World. Every
// process builds the whole mesh: the devices it owns compute (or, on a model-only mesh, are
// model-only on every process), the others are model-only stand-ins that hold no values (so
// every process can run the same program, shard for shard),
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
#include "ferry/distributed/agree.hpp"
#include "ferry/distributed/fingerprint.hpp"
#include "ferry/distributed/mpi_error.hpp"
#include "ferry/distributed/transport.hpp"
#include "ferry/distributed/world.hpp"
#include "ferry/distributed/world_calls.hpp"
#include "ferry/executor.hpp"
#include "ferry/mesh/collective_receive.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/model/mesh_spec.hpp"

namespace ferry::detail {

/// A duplicate of `comm` (every rank must ask), waited for by `calls` with `timeout`.
inline MPI_Comm mpi_duplicate(WorldCalls& calls, MPI_Comm comm, std::chrono::nanoseconds timeout,
                              std::string_view op) {
  // On the heap: MPI writes it when the duplicate completes, which may be after a timeout.
  auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request r = MPI_REQUEST_NULL;
  mpi_check(MPI_Comm_idup(comm, out.get(), &r), op, "MPI_Comm_idup");
  calls.await(r, out, timeout, op, "creating the mesh's communicators");
  return *out;
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

/// The two communicators of a mesh over processes, freed unless released to its transport.
struct MeshComms {
  MPI_Comm ctrl = MPI_COMM_NULL;
  MPI_Comm data = MPI_COMM_NULL;
  MeshComms() = default;
  MeshComms(const MeshComms&) = delete;
  MeshComms& operator=(const MeshComms&) = delete;
  ~MeshComms() {
    if (ctrl != MPI_COMM_NULL) MPI_Comm_free(&ctrl);
    if (data != MPI_COMM_NULL) MPI_Comm_free(&data);
  }
};

/// Every rank's `mine` (as many elements on every rank), in rank order, gathered on `comm`,
/// waited for by `calls` with `timeout`; `count`: mine's bytes, as mpi_count gave them.
template <class T>
std::vector<T> mpi_gather_all(WorldCalls& calls, MPI_Comm comm, int ranks,
                              const std::vector<T>& mine, int count,
                              std::chrono::nanoseconds timeout, std::string_view op,
                              std::string_view what) {
  // Both buffers outlive a gather given up on (WorldCalls::await).
  using Buffers = std::pair<std::vector<T>, std::vector<T>>;
  auto buffers = std::make_shared<Buffers>(
      mine, std::vector<T>(mine.size() * static_cast<std::size_t>(ranks)));
  MPI_Request r = MPI_REQUEST_NULL;
  mpi_check(MPI_Iallgather(buffers->first.data(), count, MPI_BYTE, buffers->second.data(), count,
                           MPI_BYTE, comm, &r),
            op, "MPI_Iallgather");
  calls.await(r, buffers, timeout, op, what);
  return std::move(buffers->second);
}

/// mesh_over, with the members of `adopted` (checked by check_adopted) being the program's
/// devices rather than new ones, and the new local devices model-only when `model_only`.
inline Mesh mesh_over_with(const mpi::World& world, MeshSpec spec,
                           const std::vector<std::int64_t>& local_members,
                           const std::vector<std::pair<std::int64_t, Device>>& adopted,
                           const Executor& executor, bool model_only) {
  constexpr std::string_view op = "mesh_over";
  const std::int64_t n = static_cast<std::int64_t>(spec.devices.size());
  // What this rank says (distributed/agree.hpp): the summary of its spec, then each device's
  // hash and what this rank is to it.
  const MeshTexts texts(spec);
  const std::vector<unsigned char> summary = mesh_summary(texts);
  std::vector<DeviceRole> roles(static_cast<std::size_t>(n), DeviceRole::other);
  for (std::int64_t m : local_members) {
    if (m < 0 || m >= n) {
      fail<InvalidArgument>(op, "member ", m, " is outside mesh ", spec.name, " of ", n,
                            " devices");
    }
    bool values_nowhere = model_only;
    for (const auto& [member, device] : adopted) {
      if (member == m) values_nowhere = device.is_model_only();
    }
    roles[static_cast<std::size_t>(m)] =
        values_nowhere ? DeviceRole::model_only : DeviceRole::computes;
  }
  const std::vector<unsigned char> devices = device_words(texts, roles);
  // Checked before any MPI call, so that every rank fails alike rather than some waiting.
  const int summary_count = mpi_count(summary.size(), op, "exchanging the mesh specs");
  const int device_count = mpi_count(devices.size(), op, "exchanging the devices each rank owns");
  const auto timeout = world.collective_timeout();
  const int ranks = world.size();
  WorldCalls& calls = world.calls();
  calls.check(op);
  MeshComms comms;
  comms.ctrl = mpi_duplicate(calls, world.communicator(), timeout, op);
  comms.data = mpi_duplicate(calls, world.communicator(), timeout, op);
  const std::vector<unsigned char> summaries = mpi_gather_all(
      calls, comms.ctrl, ranks, summary, summary_count, timeout, op, "exchanging the mesh specs");
  check_summaries(op, texts, summaries, world.rank(), ranks);
  // The shapes agree, so every rank sends as many device words.
  const MeshOwners owners = check_devices(
      op, texts, summaries,
      mpi_gather_all(calls, comms.ctrl, ranks, devices, device_count, timeout, op,
                     "exchanging the devices each rank owns"),
      world.rank(), ranks);
  auto transport = std::make_shared<MpiTransport>(
      world.progress(), world.peer_notes(), std::exchange(comms.ctrl, MPI_COMM_NULL),
      std::exchange(comms.data, MPI_COMM_NULL), owners.owner, spec.name, !owners.model_only);
  world.progress()->add(transport);
  auto mesh =
      std::make_shared<MeshState>(std::move(spec), executor, model_only, transport, adopted);
  mesh->net->attach(mesh, copy_across_processes);  // `to()` between devices of two processes
  return MeshAccess::wrap(std::move(mesh));
}

}  // namespace ferry::detail

namespace ferry::mpi {

/// A mesh as `spec` describes, over the processes of `world`: this process owns the devices at
/// the row-major positions `local_members` (their kernels run on `executor`), the others are
/// owned by the other processes, each of which makes the same call with its own members. Every
/// process must call it, in the same order relative to its other collective work. Throws
/// InvalidArgument for an invalid spec or members out of range (at the call, on this process),
/// and, on every process (distributed/agree.hpp): CollectiveMismatch when the processes' specs
/// differ, naming the rank and the fields (the mesh's name, shape, topology, axis names or a
/// link field; or a device's field, except its fault plan, naming the device); InvalidArgument
/// for a device that no process or two processes own (naming it and them), or for a mesh whose
/// owners' devices are model-only on some processes and compute on others (naming the ranks and
/// devices of each); PeerTimeout when some process does not join within the world's
/// collective_timeout; CommunicationError when MPI fails.
inline Mesh mesh_over(const World& world, MeshSpec spec,
                      const std::vector<std::int64_t>& local_members,
                      Executor executor = Executor::shared()) {
  ferry::detail::validate(spec, "mesh_over");
  return ferry::detail::mesh_over_with(world, std::move(spec), local_members, {}, executor, false);
}

/// mesh_over(world, spec, local_members, executor) with this process's devices model-only (see
/// Mesh::modeled(spec, model_only)), as every other process's must be: the same timeline as the
/// computing mesh, no values, so a program far too large to compute is modeled over many
/// processes. The collectives check their fingerprints and time out as on a computing mesh, and
/// only a status byte crosses processes per message (a failure, such as an injected fault, still
/// travels); exports throw NoValues. Throws what mesh_over(world, spec, local_members) throws.
inline Mesh mesh_over(const World& world, MeshSpec spec,
                      const std::vector<std::int64_t>& local_members, ModelOnly,
                      Executor executor = Executor::shared()) {
  ferry::detail::validate(spec, "mesh_over");
  return ferry::detail::mesh_over_with(world, std::move(spec), local_members, {}, executor, true);
}

/// mesh_over(world, spec, local_members), where this process's members are the devices the
/// program made, `local_devices[k]` for member `local_members[k]`, as they are: arrays already
/// on them stay valid and take part in the mesh's collectives, and the mesh's collectives run
/// on them. The other members are stand-ins (on the executor of the first local device), each
/// made from its entry of `spec`, so a device must be one such a stand-in models exactly. The
/// devices may be model-only (Device::modeled(spec, model_only)) if every process's are.
/// Throws, at the call and on this process before any MPI call, InvalidArgument naming the
/// values for an invalid spec, a member out of range or given twice, a device count other than
/// the members', a device given twice, a device already in a mesh that is still alive, or a
/// device whose spec differs from `spec`'s entry for its member in any field except the fault
/// plan (naming the field); then what mesh_over(world, spec, local_members) throws. No other
/// thread may use the devices during the call.
inline Mesh mesh_over(const World& world, MeshSpec spec,
                      const std::vector<std::int64_t>& local_members,
                      const std::vector<Device>& local_devices) {
  constexpr std::string_view op = "mesh_over";
  ferry::detail::validate(spec, op);
  const auto adopted =
      ferry::detail::check_adopted(op, world.rank(), spec, local_members, local_devices);
  const Executor executor =
      local_devices.empty() ? Executor::shared() : local_devices.front().executor();
  return ferry::detail::mesh_over_with(world, std::move(spec), local_members, adopted, executor,
                                       false);
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

/// mesh_over(world, spec, default_members(devices, world.rank(), world.size()), model_only,
/// executor): the devices split evenly over the ranks, model-only on every rank.
inline Mesh mesh_over(const World& world, MeshSpec spec, ModelOnly,
                      Executor executor = Executor::shared()) {
  std::vector<std::int64_t> members = default_members(
      static_cast<std::int64_t>(spec.devices.size()), world.rank(), world.size());
  return mesh_over(world, std::move(spec), members, model_only, std::move(executor));
}

}  // namespace ferry::mpi
