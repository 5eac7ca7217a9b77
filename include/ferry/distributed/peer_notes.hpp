#pragma once
// PeerNotes: one-int notes between the processes of a World (ping, pong, leaving), by which a
// process tells a live peer from one that has left or died.
//
// Each World keeps one receive posted on its communicator (which carries nothing else: meshes
// talk on duplicates of it) for a note from any peer. Whoever polls answers a ping at once with
// a pong (the progress thread, within its idle sleep of 100 ms however long the program
// computes, or a thread that waits and polls), and remembers when it last heard from each peer
// and which peers said they are leaving. Two things read them:
// - A collective whose peers are late (distributed/call_progress.hpp) pings them halfway to its
//   timeout, so that its PeerTimeout can say, of each rank that did not arrive, whether its
//   World has ended, whether it answers (running, but not making this call), or whether it has
//   not answered since (its process may have died).
// - A World that ends (depart): MPI_Finalize waits for every process of the job (Open MPI 4.1
//   fences them all), so a process whose peer died would wait there forever. Open MPI ends the
//   whole job when a process dies unless mpiexec runs with --enable-recovery; then the survivors
//   go on and must end without finalizing (measured here on a plain MPI program of 2 ranks: the
//   survivor's MPI_Finalize hung in 7 runs of 15, those where a send to the dead rank was still
//   pending; leaving without it ended all of 12). So the World tells every peer that it is
//   leaving, then waits until each has said so too or has not been heard from for the patience
//   given, pinging the silent ones meanwhile. Those are gone, and the World leaves MPI
//   unfinalized; a peer that is alive but has yet to end is waited for, as MPI_Finalize would
//   wait for it.

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

class PeerNotes final : public ProgressTask {
 public:
  using Clock = std::chrono::steady_clock;

  /// Notes over `comm`, a communicator on which nothing else is received.
  explicit PeerNotes(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    leaving_.assign(static_cast<std::size_t>(size_), false);
    heard_.assign(static_cast<std::size_t>(size_), Clock::time_point{});
    std::lock_guard lock(mutex_);
    listen();
  }

  /// Takes the notes that came (answering pings): never anything for the progress thread to
  /// hurry over, since a ping waits for its answer far longer than the thread sleeps.
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

  /// Pings `peer` now.
  void ping(int peer) {
    std::lock_guard lock(mutex_);
    if (peer != rank_ && peer >= 0 && peer < size_) send(peer, kPing);
  }
  /// When a note from `peer` last came (the clock's epoch if none has).
  Clock::time_point heard(int peer) {
    std::lock_guard lock(mutex_);
    take_notes();
    return peer >= 0 && peer < size_ ? heard_[static_cast<std::size_t>(peer)]
                                     : Clock::time_point{};
  }
  /// Whether `peer` said that its World has ended.
  bool left(int peer) {
    std::lock_guard lock(mutex_);
    take_notes();
    return peer >= 0 && peer < size_ && leaving_[static_cast<std::size_t>(peer)];
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
