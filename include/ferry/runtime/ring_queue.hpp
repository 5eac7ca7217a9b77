#pragma once
// RingQueue: a bounded multi-producer multi-consumer FIFO without locks (Dmitry Vyukov's
// design): each cell carries a sequence number saying whether it is ready for the next push
// or the next pop, so producers and consumers each claim a position with one compare-and-swap
// and never wait on each other.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry::detail {

template <class T, std::size_t Capacity>
class RingQueue {
  static_assert(Capacity >= 2 && (Capacity & (Capacity - 1)) == 0, "a power of two");

 public:
  RingQueue() noexcept {
    for (std::size_t i = 0; i < Capacity; ++i)
      cells_[i].sequence.store(i, std::memory_order_relaxed);
  }
  RingQueue(const RingQueue&) = delete;
  RingQueue& operator=(const RingQueue&) = delete;

  /// False when the queue is full.
  bool try_push(T value) noexcept {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & kMask];
      const std::size_t seq = cell.sequence.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          // Sequentially consistent, not just release: ThreadPool relies on a push being
          // ordered before its own later seq_cst load of the sleeper count (see there).
          cell.sequence.store(pos + 1, std::memory_order_seq_cst);
          return true;
        }
      } else if (diff < 0) {
        return false;  // the cell still holds a value from one lap ago: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  /// False when the queue is empty.
  bool try_pop(T& out) noexcept {
    std::size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & kMask];
      // Sequentially consistent for the same reason as the push's store.
      const std::size_t seq = cell.sequence.load(std::memory_order_seq_cst);
      const auto diff = static_cast<std::intptr_t>(seq) - static_cast<std::intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          out = cell.value;
          cell.sequence.store(pos + Capacity, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // nothing pushed into this cell yet: empty
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  /// A snapshot that may be stale by the time it is read; for wake-up heuristics only.
  bool maybe_empty() const noexcept {
    return head_.load(std::memory_order_relaxed) >= tail_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t kMask = Capacity - 1;

  struct alignas(64) Cell {
    std::atomic<std::size_t> sequence;
    T value;
  };

  std::array<Cell, Capacity> cells_;
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
};

}  // namespace ferry::detail
