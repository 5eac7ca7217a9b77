#pragma once
// ferry::mpi::MeshTraffic: the data messages a process of a mesh over MPI processes sent and
// received (ferry::mpi::traffic, in distributed/mesh_stats.hpp). Data goes to another process
// once however many of that process's devices need it (it copies the bytes for each), so these
// count what crossed between processes, not the receives of the program's steps.

#include <cstdint>

namespace ferry::mpi {

/// What this process's transport moved for one mesh since it was made: the data messages it
/// posted and their bytes, and those it received complete (a failure sent instead of data
/// counts as a message of its own length). Fingerprints are not counted.
struct MeshTraffic {
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
};

}  // namespace ferry::mpi
