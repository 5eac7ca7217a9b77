#pragma once
// WorldCalls: the collectives a World makes outside any mesh (mesh_over's duplicates of its
// communicator and exchanges of the specs, mesh_stats' gather of the devices' figures), each
// waited for with the world's collective_timeout. MPI pairs a communicator's collectives by
// their order and cannot cancel one, so a call given up on stays pending and would pair with
// another rank's next call: from then on the ranks' calls are out of step for good (a late
// rank's mesh_over pairs its first duplicate with the abandoned one, then waits alone for its
// second). So the first failure is kept, and every later call fails at once with it rather
// than pairing wrongly; and what a call given up on reads and writes (its buffers, the
// communicator a duplicate makes) is kept until the process ends, since MPI may still write
// into it when a late rank joins.

#include <mpi.h>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/distributed/mpi_error.hpp"

namespace ferry::detail {

/// Keeps `what` until the process ends: MPI may write into it (a collective that was given up
/// on) even after the World is gone. Held from a static, so leak checkers see it reachable.
inline void keep_until_exit(std::shared_ptr<void> what) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  std::lock_guard lock(mutex);
  kept->push_back(std::move(what));
}

class WorldCalls {
 public:
  /// Throws, at the start of a call made as `op`, the failure that put the world's calls out of
  /// step, if one did: PeerTimeout after a timeout, CommunicationError after an MPI error.
  void check(std::string_view op) const {
    std::exception_ptr failed;
    {
      std::lock_guard lock(mutex_);
      failed = failed_;
    }
    if (!failed) return;
    constexpr std::string_view why =
        "the ranks' collectives outside meshes (mesh_over, mesh_stats) are out of step since "
        "one failed: ";
    try {
      std::rethrow_exception(failed);
    } catch (const PeerTimeout& e) {
      fail<PeerTimeout>(op, why, e.what());
    } catch (const Error& e) {
      fail<CommunicationError>(op, why, e.what());
    }
  }

  /// Whether a call failed (so that one may still be pending on the world's communicator).
  bool failed() const {
    std::lock_guard lock(mutex_);
    return failed_ != nullptr;
  }

  /// Records `error`, a failure of a call that left the ranks out of step, and throws it: its
  /// exchange completed, but what came shows that the ranks' calls did not pair (Open MPI
  /// completes a gather that met another rank's different call with no error: it prints one
  /// and leaves that rank's part of the buffer as it was).
  [[noreturn]] void give_up(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      if (!failed_) failed_ = error;
    }
    std::rethrow_exception(error);
  }

  /// Waits until `r` (made as `op`, doing `what`), which reads and writes what `keep` holds,
  /// completes, for `timeout` at most. Throws PeerTimeout when some rank has not joined by
  /// then, CommunicationError when MPI fails it; either way `keep` is kept until the process
  /// ends and every later call of the world fails (check).
  void await(MPI_Request& r, std::shared_ptr<void> keep, std::chrono::nanoseconds timeout,
             std::string_view op, std::string_view what) {
    try {
      wait_for(r, timeout, op, what);
    } catch (...) {
      keep_until_exit(std::move(keep));
      give_up(std::current_exception());
    }
  }

 private:
  static void wait_for(MPI_Request& r, std::chrono::nanoseconds timeout, std::string_view op,
                       std::string_view what) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int flag = 0;
      mpi_check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), op, "MPI_Test");
      if (flag != 0) return;
      if (std::chrono::steady_clock::now() >= until) {
        fail<PeerTimeout>(op, what, ": not every rank joined within ",
                          std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count(),
                          " ms (the world's collective_timeout)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  mutable std::mutex mutex_;
  std::exception_ptr failed_;
};

}  // namespace ferry::detail
