#pragma once
// BoundedRing<T>: a FIFO of at most `capacity` large elements whose slots never move: the
// trace's slices. Ring<T> doubles one array, which suits small elements; for a slice (about 250
// bytes, a shape and a list inside) each doubling moved every slice into memory the process had
// never touched, and built the new half before any slice used it. A device's first program paid
// for that in page faults: on a new Galaxy mesh (32 devices) the trace's growth was 42% of a
// training step's faults. Here each slot is built once, when the ring first reaches it, and the
// memory touched is the slots used.

#include <cstddef>

#include "ferry/model/blocks.hpp"

namespace ferry::detail {

template <class T>
class BoundedRing {
 public:
  explicit BoundedRing(std::size_t capacity) : capacity_(capacity) {}

  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool full() const noexcept { return size_ == capacity_; }
  T& operator[](std::size_t i) noexcept { return slots_[slot(i)]; }
  const T& operator[](std::size_t i) const noexcept { return slots_[slot(i)]; }

  /// The slot at the back, as its last element left it (default-made when new): for a T whose
  /// user sets every field it needs. The ring must not be full.
  T& emplace_back_as_left() {
    // Slots are taken in order from 0, so the back is at most one past the slots built.
    const std::size_t at = slot(size_);
    if (at == slots_.size()) slots_.cover(at + 1);
    ++size_;
    return slots_[at];
  }

  /// Drops the front element (its slot is reused, as it was left, later).
  void pop_front() noexcept {
    head_ = head_ + 1 == capacity_ ? 0 : head_ + 1;
    --size_;
  }

  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }

  /// Slots built so far: what the ring has touched, at most capacity().
  std::size_t built() const noexcept { return slots_.size(); }

 private:
  std::size_t slot(std::size_t i) const noexcept {
    const std::size_t at = head_ + i;
    return at >= capacity_ ? at - capacity_ : at;
  }

  Blocks<T> slots_;
  std::size_t capacity_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
