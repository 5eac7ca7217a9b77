#pragma once
// ferry::mpi::World: the MPI processes of a job, as ferry uses them. It initializes MPI (or
// adopts the program's), owns a communicator of its own (a duplicate of MPI_COMM_WORLD that
// returns errors instead of aborting, so that MPI's errors become ferry errors and ferry's
// messages never mix with the program's), the progress thread that drives every mesh made over
// it (distributed/progress.hpp), and the notes by which its processes tell each other that they
// are alive or leaving (distributed/peer_notes.hpp): a World that initialized MPI ends with the
// others, or without one that died.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/distributed/mpi_error.hpp"
#include "ferry/distributed/peer_notes.hpp"
#include "ferry/distributed/progress.hpp"
#include "ferry/distributed/world_calls.hpp"

namespace ferry::mpi {

/// The processes of the job. Make one, on the main thread, before any mesh over it; meshes and
/// their arrays must not be used after it is gone. Neither copyable nor movable.
class World {
 public:
  /// Initializes MPI with MPI_THREAD_MULTIPLE (the progress thread and the program's threads
  /// both call MPI) and finalizes it on destruction; when the program initialized MPI itself,
  /// adopts it instead and leaves finalizing to the program. Throws CommunicationError when MPI
  /// provides less thread support than MPI_THREAD_MULTIPLE, or an MPI call fails.
  World(int& argc, char**& argv) { start(&argc, &argv); }
  /// As World(argc, argv), without the program's arguments.
  World() { start(nullptr, nullptr); }

  World(const World&) = delete;
  World& operator=(const World&) = delete;

  /// Tells every other process it is leaving and waits until each has said so too, or has not
  /// answered for collective_timeout (1 s at least): a process that died, where mpiexec lets
  /// the others go on (Open MPI's --enable-recovery). Then stops the progress thread, fails
  /// whatever is still in flight (CommunicationError), frees ferry's communicators, and
  /// finalizes MPI when this World initialized it, unless a process died: MPI_Finalize would
  /// wait for it, so the World then says so on stderr and leaves MPI as is.
  ~World() {
    bool finalize = owns_;
    if (notes_) {
      // Adopted or not, it waits for every peer's note that it is leaving too: a note still on
      // its way when the communicator is freed reached a later one with its number (a second
      // World's, in Open MPI 4.1), and the program's own calls on MPI_COMM_WORLD then hung.
      const std::chrono::nanoseconds patience =
          std::max<std::chrono::nanoseconds>(engine_->timeout(), std::chrono::seconds(1));
      const std::vector<int> gone = notes_->depart(patience);
      if (owns_ && !gone.empty()) {  // else the program finalizes, as it sees fit
        finalize = false;
        std::string ranks;
        for (const int r : gone) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        std::fprintf(stderr,
                     "ferry::mpi::World on rank %d: rank%s %s stopped answering; leaving "
                     "without MPI_Finalize, which would wait for %s\n",
                     rank_, gone.size() > 1 ? "s" : "", ranks.c_str(),
                     gone.size() > 1 ? "them" : "it");
      }
    }
    if (engine_) engine_->stop();
    // A collective of its own given up on may still be pending on the communicator: freed
    // under it, MPI_Finalize corrupted the heap. MPI_Finalize frees it then.
    if (comm_ != MPI_COMM_NULL && !calls_.failed()) MPI_Comm_free(&comm_);
    if (finalize) MPI_Finalize();
  }

  /// This process's rank, in [0, size()).
  int rank() const noexcept { return rank_; }
  /// The number of processes.
  int size() const noexcept { return size_; }
  /// Whether this World initialized MPI (and finalizes it), rather than adopting it.
  bool owns_mpi() const noexcept { return owns_; }

  /// How long a collective waits for every process to join it, and for each message once
  /// they have, before it fails with PeerTimeout (3 minutes unless set).
  std::chrono::nanoseconds collective_timeout() const { return engine_->timeout(); }
  /// Sets collective_timeout for collectives begun from now on. Throws InvalidArgument for a
  /// timeout that is not positive.
  void set_collective_timeout(std::chrono::nanoseconds timeout) {
    if (timeout <= std::chrono::nanoseconds::zero()) {
      detail::fail<InvalidArgument>("World::set_collective_timeout",
                                    "timeout must be positive, got ", timeout.count(), " ns");
    }
    engine_->set_timeout(timeout);
  }

  /// ferry's communicator (a duplicate of MPI_COMM_WORLD, errors returned): meshes duplicate it
  /// again for their own messages.
  MPI_Comm communicator() const noexcept { return comm_; }
  /// The progress thread (for meshes made over this world).
  const std::shared_ptr<detail::MpiProgress>& progress() const noexcept { return engine_; }
  /// The notes by which the processes tell each other that they are alive or leaving (for
  /// meshes made over this world); null with one process.
  const std::shared_ptr<detail::PeerNotes>& peer_notes() const noexcept { return notes_; }
  /// The collectives it makes outside any mesh (mesh_over's, mesh_stats'), and whether one has
  /// failed, which puts every later one out of step (distributed/world_calls.hpp).
  detail::WorldCalls& calls() const noexcept { return calls_; }

 private:
  void start(int* argc, char*** argv) {
    constexpr const char* op = "World";
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;
    if (initialized != 0) {
      MPI_Query_thread(&provided);
    } else {
      detail::mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), op,
                        "MPI_Init_thread");
      owns_ = true;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      const std::string level = provided == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
                                : provided == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
                                : provided == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                                                                    : std::to_string(provided);
      if (owns_) MPI_Finalize();
      detail::fail<CommunicationError>(
          op, "MPI provides ", level,
          "; ferry needs MPI_THREAD_MULTIPLE (its progress thread calls MPI beside the "
          "program's threads)");
    }
    detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), op, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    engine_ = std::make_shared<detail::MpiProgress>(std::chrono::minutes(3));
    if (size_ > 1) {
      notes_ = std::make_shared<detail::PeerNotes>(comm_);
      engine_->add(notes_);
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool owns_ = false;
  std::shared_ptr<detail::MpiProgress> engine_;
  std::shared_ptr<detail::PeerNotes> notes_;  // when other processes exist
  mutable detail::WorldCalls calls_;
};

}  // namespace ferry::mpi
