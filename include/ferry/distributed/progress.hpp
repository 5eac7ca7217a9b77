#pragma once
// MpiProgress: the one thread per ferry::mpi::World that drives MPI's non-blocking calls. MPI
// moves data only while someone calls into it, and ferry's executor threads must never block
// on the network: so every transport of the world (one per mesh, distributed/transport.hpp)
// registers here, and this thread polls each in turn (MPI_Test, never MPI_Wait), completes the
// steps whose data arrived and fails those whose peers disagree or never come.
//
// How often it polls decides a small collective's time: a message that has arrived waits for
// the next poll. So while a call is pending and something moved lately, it polls back to back
// (yielding the core between polls, which this machine's executors share); once nothing has
// moved for a while (a peer still computing what it will send, a large message on its way) it
// backs off to naps that grow to a fraction of a millisecond; with nothing pending it sleeps
// on a condition variable until a call begins. A nap of 20 us costs ~70 us on Linux (the
// timer's slack), and a small all-reduce waits for three or so polls: napping while a
// message is due made the fixed cost of a collective hundreds of microseconds.
//
// A thread that waits for a step (ferry::wait, an export) polls the tasks itself meanwhile
// (runtime/wait_driver.hpp): the gate it waits behind then opens on its own thread, and the
// steps that gate makes ready run there too, rather than after a hand-off to this thread, to a
// worker and back through a futex, each of which can cost a scheduler slice where the threads
// outnumber the cores. While a waiter polls, this thread stands aside
// (naps), so that the two do not take turns on the same core for the same messages; it still
// drives the calls that nobody waits for, so a collective overlaps compute as before.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/runtime/wait_driver.hpp"

namespace ferry::detail {

/// What a task has in flight after a poll, least first: nothing; only what no peer is known to
/// wait for (sends of a failed call, cancelled receives: polled now and then until MPI lets go
/// of them); calls still waiting for messages; or calls of which something completed in this
/// poll (so more is likely due soon).
enum class Activity { idle, lingering, waiting, moved };

/// What the progress thread drives: a transport.
class ProgressTask {
 public:
  ProgressTask() = default;
  ProgressTask(const ProgressTask&) = delete;
  ProgressTask& operator=(const ProgressTask&) = delete;
  virtual ~ProgressTask() = default;

  /// Tests what is in flight and acts on what finished or timed out: what is left (see
  /// Activity). Called on the progress thread only.
  virtual Activity progress() = 0;
  /// The world ends: fail what is pending, let go of every MPI object. Called once, after the
  /// progress thread has stopped, before MPI is finalized.
  virtual void shutdown() = 0;
};

class MpiProgress {
 public:
  explicit MpiProgress(std::chrono::nanoseconds timeout)
      : timeout_ns_(timeout.count()), driver_(std::make_shared<Driver>(*this)) {
    thread_ = std::thread([this] { loop(); });
    WaitDrivers::instance().add(driver_);
  }
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;
  ~MpiProgress() { stop(); }

  /// Drives `task` from now until it is gone or the world ends.
  void add(const std::shared_ptr<ProgressTask>& task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(task);
    }
    wake();
  }

  /// Something new is pending: poll now rather than after the idle sleep. A call wakes it a
  /// few times in a row (its begin, receives, sends, end): only the first, until the thread
  /// takes the news, takes the lock and notifies. The thread polls again after taking it, so
  /// what a skipped wake-up announced is seen.
  void wake() {
    if (work_.exchange(true, std::memory_order_acq_rel)) return;
    { std::lock_guard lock(mutex_); }  // the thread is asleep or has yet to test work_
    cv_.notify_one();
  }

  /// How long a collective waits for a peer before it fails with PeerTimeout.
  std::chrono::nanoseconds timeout() const {
    return std::chrono::nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
  }
  void set_timeout(std::chrono::nanoseconds t) {
    timeout_ns_.store(t.count(), std::memory_order_relaxed);
  }

  /// Whether the world has ended (stop() was called): transports then refuse new calls.
  bool stopped() const { return stop_.load(std::memory_order_acquire); }

  /// Keeps `comm` (a mesh's, no longer used) until the world ends, then frees it. Freed at
  /// once, its context id could be reused by the next mesh's communicator while a message of a
  /// failed collective (one a peer sent that nobody will receive) still waits under that id,
  /// and that message would then match a receive of the new mesh.
  void retire(MPI_Comm comm) {
    std::lock_guard lock(mutex_);
    retired_.push_back(comm);
  }

  /// Stops the thread, then shuts every live task down and frees the retired communicators.
  /// Idempotent.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    // No waiter polls from now on (one polling now finishes first).
    WaitDrivers::instance().remove(driver_.get());
    driver_->detach();
    cv_.notify_one();
    thread_.join();
    std::vector<std::shared_ptr<ProgressTask>> live;
    live_tasks(live);
    for (const auto& t : live) t->shutdown();
    std::lock_guard lock(mutex_);
    for (MPI_Comm& c : retired_) MPI_Comm_free(&c);
    retired_.clear();
  }

 private:
  using Clock = std::chrono::steady_clock;

  /// The waiters' side (runtime/wait_driver.hpp): one poll of every task on the waiting thread,
  /// until the world stops. Waiters poll one at a time.
  class Driver final : public WaitDriver {
   public:
    explicit Driver(MpiProgress& owner) : owner_(&owner) {}
    Drive drive() noexcept override {
      std::lock_guard lock(mutex_);
      if (owner_ == nullptr) return Drive::idle;
      owner_->driven_at_.store(Clock::now().time_since_epoch().count(),
                               std::memory_order_relaxed);
      try {
        switch (owner_->poll(live_)) {
          case Activity::moved: return Drive::moved;
          case Activity::waiting: return Drive::waiting;
          default: return Drive::idle;  // lingering: nobody waits for it
        }
      } catch (...) {
        return Drive::idle;  // the progress thread meets the same error and reports it
      }
    }
    void detach() {
      std::lock_guard lock(mutex_);
      owner_ = nullptr;
    }

   private:
    std::mutex mutex_;
    MpiProgress* owner_;  // guarded by mutex_; null once the world stops
    std::vector<std::shared_ptr<ProgressTask>> live_;  // poll()'s, guarded by mutex_
  };

  /// One poll of every live task: the most any has left. `live`: the caller's own list to
  /// hold them in (empty, and left empty; its capacity is kept, so that a poll allocates
  /// nothing).
  Activity poll(std::vector<std::shared_ptr<ProgressTask>>& live) {
    live_tasks(live);
    Activity most = Activity::idle;
    try {
      for (const auto& t : live) most = std::max(most, t->progress());
    } catch (...) {
      live.clear();
      throw;
    }
    // Held only while polling: a task whose mesh is gone may be destroyed here, on this
    // thread (its destructor lets go of its MPI objects).
    live.clear();
    return most;
  }

  /// Whether a waiter polled within `span`.
  bool driven_within(Clock::duration span) const {
    const Clock::time_point at(Clock::duration(driven_at_.load(std::memory_order_relaxed)));
    return Clock::now() - at < span;
  }

  /// Every task still alive, into `live` (empty); the others are forgotten.
  void live_tasks(std::vector<std::shared_ptr<ProgressTask>>& live) {
    std::lock_guard lock(mutex_);
    std::erase_if(tasks_, [&live](const std::weak_ptr<ProgressTask>& t) {
      auto p = t.lock();
      if (!p) return true;
      live.push_back(std::move(p));
      return false;
    });
  }

  void loop() {
    // While calls wait: back to back for `eager` after the last thing that moved (or the last
    // call begun), then naps from `first_nap`, doubling up to `longest_nap`.
    constexpr auto eager = std::chrono::microseconds(500);
    constexpr auto first_nap = std::chrono::microseconds(10);
    constexpr auto longest_nap = std::chrono::microseconds(320);
    auto last_moved = Clock::now();
    std::chrono::microseconds nap = first_nap;
    // A waiter that polled this recently is taken to poll still: this thread naps meanwhile.
    constexpr auto stand_aside = std::chrono::microseconds(200);
    std::vector<std::shared_ptr<ProgressTask>> live;  // poll()'s
    for (;;) {
      if (driven_within(stand_aside)) {
        {
          std::lock_guard lock(mutex_);
          if (stop_) return;
        }
        std::this_thread::sleep_for(stand_aside);
        last_moved = Clock::now();  // the waiter moved things meanwhile, for all we know
        nap = first_nap;
        continue;
      }
      Activity most = poll(live);
      std::unique_lock lock(mutex_);
      if (stop_) return;
      const auto now = Clock::now();
      const bool woken = work_.exchange(false, std::memory_order_acq_rel);
      if (most == Activity::moved || woken) {
        last_moved = now;
        nap = first_nap;
        // A call begun (or data made ready) after its transport was polled above: poll again
        // at once. Taking work_ without it would sleep through the wake-up that set it, up to
        // 100 ms with a call pending (seen: a 1 KiB all-reduce of 100 ms).
        if (woken) most = std::max(most, Activity::waiting);
      }
      if (most == Activity::waiting || most == Activity::moved) {
        lock.unlock();
        if (now - last_moved < eager) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(nap);
          nap = std::min(nap * 2, longest_nap);
        }
      } else {
        // Idle, or lingering sends and cancellations that nobody waits for: until a call
        // begins (wake()), looking at the lingering now and then.
        cv_.wait_for(lock, std::chrono::milliseconds(most == Activity::idle ? 100 : 10),
                     [this] { return work_.load(std::memory_order_acquire) || stop_.load(); });
      }
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<ProgressTask>> tasks_;  // guarded by mutex_
  std::vector<MPI_Comm> retired_;                    // guarded by mutex_
  std::atomic<std::int64_t> timeout_ns_;
  std::atomic<bool> work_{false};  // set by wake(), taken by the thread
  std::atomic<bool> stop_{false};  // set under mutex_ (the thread waits on cv_ for it)
  std::atomic<Clock::rep> driven_at_{0};  // when a waiter last polled (Clock's ticks)
  std::shared_ptr<Driver> driver_;
  std::thread thread_;
};

}  // namespace ferry::detail
