#pragma once
// WaitDriver: what a thread that waits for a step may drive meanwhile, instead of sleeping.
// MPI moves data only while someone calls into it (ferry/distributed/progress.hpp): a rank
// that waits for a collective's result would otherwise sleep while the world's progress thread
// polls, completes the receive's gate and wakes a worker, which completes the step and wakes
// the waiter; on a machine whose cores the threads outnumber, each of those hand-offs can wait
// a scheduler slice. A waiter that polls the transport itself opens the gate on its own thread
// and sees the result done without being woken. The core knows no transport: ferry::mpi's
// world registers one driver here, and ThreadPool::wait polls the registered drivers while
// they have something pending. With none registered (every program without MPI), wait blocks
// as before, after one atomic load.
//
// The steps that a gate opened during such a poll makes ready on the waiter's own executor (the
// copy of what arrived, then the reduction, for a small all-reduce) the waiter runs itself,
// until the step it waits for is done: posted to a sleeping worker instead, they would cost a
// wake-up of that worker and another of the waiter when the worker completes the step, each of
// which may wait a scheduler slice where the threads outnumber the cores.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/runtime/executor.hpp"
#include "ferry/runtime/executor_base.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// What one poll of a driver found, least first: nothing pending that polling would move (the
/// waiter may sleep), something pending, or something that completed in this poll.
enum class Drive { idle, waiting, moved };

class WaitDriver {
 public:
  WaitDriver() = default;
  WaitDriver(const WaitDriver&) = delete;
  WaitDriver& operator=(const WaitDriver&) = delete;
  virtual ~WaitDriver() = default;
  /// Polls once, on the waiting thread. Thread-safe; never throws.
  virtual Drive drive() noexcept = 0;
};

/// The registered drivers: process-wide, never destroyed (a World that outlives main's locals
/// unregisters after static destruction has begun).
class WaitDrivers {
 public:
  static WaitDrivers& instance() {
    static auto* drivers = new WaitDrivers();
    return *drivers;
  }
  using List = std::vector<std::shared_ptr<WaitDriver>>;
  void add(std::shared_ptr<WaitDriver> d) {
    std::lock_guard lock(mutex_);
    auto next = std::make_shared<List>(*list_);
    next->push_back(std::move(d));
    publish(std::move(next));
  }
  void remove(const WaitDriver* d) {
    std::lock_guard lock(mutex_);
    auto next = std::make_shared<List>(*list_);
    std::erase_if(*next, [d](const auto& p) { return p.get() == d; });
    publish(std::move(next));
  }
  bool any() const noexcept { return count_.load(std::memory_order_acquire) != 0; }
  /// The drivers registered now. The list is never changed once published (add and remove
  /// publish a new one), so a waiter shares it rather than copying it: no allocation a wait.
  std::shared_ptr<const List> snapshot() const {
    std::lock_guard lock(mutex_);
    return list_;
  }

 private:
  WaitDrivers() = default;
  void publish(std::shared_ptr<const List> next) {
    count_.store(next->size(), std::memory_order_release);
    list_ = std::move(next);
  }
  mutable std::mutex mutex_;
  std::shared_ptr<const List> list_ = std::make_shared<List>();  // guarded by mutex_
  std::atomic<std::size_t> count_{0};
};

/// The steps made ready on `executor` by gates opened while this thread polls the drivers for
/// a waiter of that executor (wait_driving runs them). A fixed few: more go to the executor.
struct ReadySink {
  ExecutorBase* executor = nullptr;
  std::array<Step*, 16> steps{};
  std::size_t count = 0;
};
inline thread_local ReadySink* t_ready_sink = nullptr;

/// Hands `ready` (a successor that a gate made ready) to this thread's sink when it polls for a
/// waiter of `ready`'s executor and the sink has room, to its executor otherwise.
inline void hand_on_ready(Step& ready) {
  ReadySink* sink = t_ready_sink;
  if (sink != nullptr && &ready.executor() == sink->executor && sink->count < sink->steps.size()) {
    sink->steps[sink->count++] = &ready;
  } else {
    ready.executor().post(ready);
  }
}

/// The fewest chunks of a kernel's job that a waiter running steps (run_ready) wakes sleeping
/// workers for (t_wake_for_chunks): a job of two, its own and one more, it runs with the workers
/// already awake. A helper could take one chunk at most (kChunkBytes of a memory-bound kernel:
/// 2 to 4 us of a fold or a copy here), where a sleeper's wake-up costs the waiter a futex call
/// and, with more threads than cores, its core for the woken worker's slice: a 128 KiB part's
/// fold (2 ranks, 256 KiB all-reduce) took 11 us when it woke the rank's worker, 4 us alone. A
/// matmul splits into 4 chunks at least (kernels/matmul.hpp), a 2 MiB part's fold into 22: those
/// still wake the workers.
inline constexpr std::int64_t kWaiterWakesForChunks = 3;

/// Runs the steps in `sink` (and the chains of their successors on its executor) on this
/// thread until `s` is done; what is left then goes to the executor.
inline void run_ready(ReadySink& sink, const Step& s) {
  const std::int64_t outer = std::exchange(t_wake_for_chunks, kWaiterWakesForChunks);
  for (std::size_t i = 0; i < sink.count; ++i) {
    Step* next = sink.steps[i];
    while (next != nullptr && !s.done()) next = run_step(*next, sink.executor);
    if (next != nullptr) sink.executor->post(*next);
  }
  t_wake_for_chunks = outer;
  sink.count = 0;
}

/// Returns once `s` is done. While a registered driver has something pending, the caller polls
/// it: back to back (yielding the core) while things move, then naps that grow, as the progress
/// thread does (a large message takes milliseconds; spinning through them would take the core
/// from the workers that reduce it). Once no driver has anything pending, it blocks. `self`:
/// the executor that waits (the caller's pool), whose steps made ready by the polls this thread
/// runs itself (see the top of this file).
inline void wait_driving(const Step& s, ExecutorBase& self) {
  const WaitDrivers& registry = WaitDrivers::instance();
  if (s.done() || !registry.any()) return s.wait_done();
  using Clock = std::chrono::steady_clock;
  constexpr auto eager = std::chrono::microseconds(500);
  constexpr auto first_nap = std::chrono::microseconds(10);
  constexpr auto longest_nap = std::chrono::microseconds(320);
  const auto drivers = registry.snapshot();
  auto last_moved = Clock::now();
  auto nap = first_nap;
  ReadySink sink;
  sink.executor = &self;
  for (;;) {
    Drive most = Drive::idle;
    ReadySink* const outer = std::exchange(t_ready_sink, &sink);
    for (const auto& d : *drivers) most = std::max(most, d->drive());
    t_ready_sink = outer;
    run_ready(sink, s);
    if (s.done()) return;
    if (most == Drive::idle) return s.wait_done();
    const auto now = Clock::now();
    if (most == Drive::moved) {
      last_moved = now;
      nap = first_nap;
    }
    if (now - last_moved < eager) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, longest_nap);
    }
  }
}

}  // namespace ferry::detail
