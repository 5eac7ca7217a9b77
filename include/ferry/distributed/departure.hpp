#pragma once
// Departure: how the processes of a World leave MPI together, or leave without one that died.
//
// MPI_Finalize waits for every process of the job (Open MPI 4.1 fences them all), so a process
// whose peer has died would wait there forever. Open MPI ends the whole job when a process dies
// unless mpiexec runs with --enable-recovery; then the survivors go on (their collectives with
// the dead rank fail with PeerTimeout), and they must end without finalizing: seen here, a
// survivor's MPI_Finalize hung in one run of three.
//
// So a World that initialized MPI keeps one receive posted on its communicator (which carries
// nothing else: meshes talk on duplicates of it) for one-int notes from any peer: a ping, which
// whoever polls answers at once with a pong (the progress thread, or a thread that waits and
// polls), a pong, or "leaving". When the World ends it tells every peer it is leaving, then
// waits until each peer has said so too or has not been heard from for the patience it is
// given, pinging the silent ones meanwhile. A live process answers within its progress thread's
// idle sleep (100 ms) however long its program computes, so a peer silent for the whole
// patience has died (or is frozen: stopped by a signal); the World then leaves MPI unfinalized.
// A peer that is alive but has yet to end (its program still runs) is waited for, as
// MPI_Finalize would wait for it.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

#include "ferry/distributed/messages.hpp"
#include "ferry/distributed/progress.hpp"

namespace ferry::detail {

class Departure final : public ProgressTask {
  using Clock = std::chrono::steady_clock;

 public:
  /// Notes over `comm`, a communicator on which nothing else is received.
  explicit Departure(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    leaving_.assign(static_cast<std::size_t>(size_), false);
    heard_.assign(static_cast<std::size_t>(size_), Clock::time_point{});
    std::lock_guard lock(mutex_);
    listen();
  }

  /// Takes the notes that came (answering pings): never anything for the progress thread to
  /// hurry over, since a ping waits for an answer only as long as a departing peer's patience.
  Activity progress() override {
    std::lock_guard lock(mutex_);
    take_notes();
    return Activity::idle;
  }

  /// Cancels the receive, and gives the notes still being sent a second to be taken.
  void shutdown() override {
    std::lock_guard lock(mutex_);
    if (receive_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&receive_);
      MPI_Wait(&receive_, MPI_STATUS_IGNORE);
    }
    const auto until = Clock::now() + std::chrono::seconds(1);
    for (MPI_Request& r : sends_) mpi_data::settle_or_free(r, until);
    sends_.clear();
  }

  /// Tells every peer that this process is leaving, then waits until each has said so too or
  /// has not been heard from for `patience`: returns the latter, the peers gone (ranks,
  /// ascending). Called once, as the World ends, before the progress thread stops.
  std::vector<int> depart(std::chrono::nanoseconds patience) {
    const auto start = Clock::now();
    // A live peer answers within ~100 ms: a few pings fit in the patience.
    const auto ping_every = std::clamp<Clock::duration>(
        patience / 8, std::chrono::milliseconds(10), std::chrono::milliseconds(500));
    std::vector<Clock::time_point> pinged(static_cast<std::size_t>(size_), start);
    std::vector<int> gone;
    {
      std::lock_guard lock(mutex_);
      for (int p = 0; p < size_; ++p) {
        if (p != rank_) send(p, kLeaving);
      }
    }
    for (;;) {
      bool waiting = false;
      gone.clear();
      {
        std::lock_guard lock(mutex_);
        take_notes();
        const auto now = Clock::now();
        for (int p = 0; p < size_; ++p) {
          const auto i = static_cast<std::size_t>(p);
          if (p == rank_ || leaving_[i]) continue;
          if (now - std::max(heard_[i], start) >= patience) {
            gone.push_back(p);
            continue;
          }
          waiting = true;
          if (now - pinged[i] >= ping_every) {
            send(p, kPing);
            pinged[i] = now;
          }
        }
      }
      if (!waiting) return gone;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  // The notes: what a one-int message means. Sent from this array, which outlives every send.
  enum Note : int { kPing = 0, kPong = 1, kLeaving = 2 };
  static constexpr int kNotes[] = {kPing, kPong, kLeaving};
  static constexpr int kTag = 0;

  /// Posts the receive of the next note (under mutex_).
  void listen() {
    if (MPI_Irecv(&note_, 1, MPI_INT, MPI_ANY_SOURCE, kTag, comm_, &receive_) != MPI_SUCCESS) {
      receive_ = MPI_REQUEST_NULL;  // deaf from now on: silent peers count as gone when leaving
    }
  }

  /// Sends `note` to `peer` (under mutex_); a send MPI refuses is dropped: the peer then takes
  /// this process for gone, which is what it would be to MPI.
  void send(int peer, Note note) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(&kNotes[note], 1, MPI_INT, peer, kTag, comm_, &r) == MPI_SUCCESS) {
      sends_.push_back(r);
    }
  }

  /// Takes every note that has come, answers the pings, forgets the sends done (under mutex_).
  void take_notes() {
    while (receive_ != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Test(&receive_, &flag, &status) != MPI_SUCCESS) {
        if (receive_ != MPI_REQUEST_NULL) MPI_Request_free(&receive_);
        receive_ = MPI_REQUEST_NULL;
        break;
      }
      if (flag == 0) break;
      const int from = status.MPI_SOURCE;
      if (from >= 0 && from < size_) {
        heard_[static_cast<std::size_t>(from)] = Clock::now();
        if (note_ == kPing) send(from, kPong);
        if (note_ == kLeaving) leaving_[static_cast<std::size_t>(from)] = true;
      }
      listen();
    }
    std::erase_if(sends_, [](MPI_Request& r) { return mpi_data::test_once(r); });
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::mutex mutex_;
  int note_ = 0;                            // the receive's buffer, guarded by mutex_
  MPI_Request receive_ = MPI_REQUEST_NULL;  // guarded by mutex_
  std::vector<MPI_Request> sends_;          // in flight, guarded by mutex_
  std::vector<bool> leaving_;               // per rank: said it is leaving; guarded by mutex_
  std::vector<Clock::time_point> heard_;    // per rank: its last note; guarded by mutex_
};

}  // namespace ferry::detail
