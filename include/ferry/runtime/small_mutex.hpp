#pragma once
// SmallMutex: a lock for a device's model, taken on every submission, dropped handle and
// export. Uncontended (as it nearly always is: one host thread drives a device), lock is one
// compare-and-swap and unlock one exchange, inline; std::mutex spent about 60 instructions a
// lock and unlock in pthread's calls (a sixth of the model's per-command cost outside the
// simulation, measured on benchmarks/mesh_model.cpp). Contended, a thread sleeps in
// atomic::wait (a futex) until the holder wakes it: a wait may be long (an export decides the
// schedule under the lock), so nobody spins.
//
// The states: 0 free; 1 held, nobody waiting; 2 held, perhaps with sleepers (U. Drepper,
// "Futexes Are Tricky", mutex 2).

#include <atomic>
#include <cstdint>

namespace ferry::detail {

class SmallMutex {
 public:
  SmallMutex() = default;
  SmallMutex(const SmallMutex&) = delete;
  SmallMutex& operator=(const SmallMutex&) = delete;

  void lock() noexcept {
    std::uint32_t c = 0;
    if (state_.compare_exchange_strong(c, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    // Held: mark it contended (the holder then wakes a sleeper as it unlocks) and sleep until
    // it is free; whoever takes it this way keeps it marked, since others may still sleep.
    if (c != 2) c = state_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
      state_.wait(2, std::memory_order_relaxed);
      c = state_.exchange(2, std::memory_order_acquire);
    }
  }

  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  std::atomic<std::uint32_t> state_{0};
};

}  // namespace ferry::detail
