#pragma once
// Ring<T>: a FIFO (or, with emplace_front, a double-ended queue) over one growing array.
// std::deque allocates a block for every few large elements (512-byte blocks hold one
// Command), which made the model allocate per step; a ring reuses its slots and only allocates
// when it doubles. Large elements (the trace's slices) live in a BoundedRing, which never
// moves them.

#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class T>
class Ring {
 public:
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) & (capacity_ - 1)]; }
  const T& operator[](std::size_t i) const noexcept {
    return slots_[(head_ + i) & (capacity_ - 1)];
  }
  T& front() noexcept { return (*this)[0]; }
  const T& front() const noexcept { return (*this)[0]; }
  T& back() noexcept { return (*this)[size_ - 1]; }

  /// A fresh element at the back. References to other elements stay valid unless the ring
  /// grows (when it holds as many elements as it has slots).
  T& emplace_back() {
    if (size_ == capacity_) grow();
    T& slot = (*this)[size_];
    slot = T{};
    ++size_;
    return slot;
  }

  /// A fresh element at the front; references as for emplace_back.
  T& emplace_front() {
    if (size_ == capacity_) grow();
    head_ = (head_ + capacity_ - 1) & (capacity_ - 1);
    ++size_;
    T& slot = (*this)[0];
    slot = T{};
    return slot;
  }

  /// Drops the front element (its slot is reused, and its resources freed, later).
  void pop_front() noexcept {
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }

  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }

 private:
  void grow() {
    // The elements move into place, where default-making every slot first and then moving
    // onto it cost twice as much for a large T.
    // It grows only when full, so its elements are the two runs [head_, end) and [0, head_):
    // each moves as one range, a memmove for a trivially copyable T (an event, a sample),
    // where a push_back per element cost some 15 instructions each (a chain's host events
    // and trace samples grow with the steps decided at its one export).
    const std::size_t capacity = capacity_ == 0 ? 16 : capacity_ * 2;
    std::vector<T> bigger;
    bigger.reserve(capacity);
    const auto first = std::make_move_iterator(slots_.begin());
    const auto at = first + static_cast<std::ptrdiff_t>(head_);
    bigger.insert(bigger.end(), at, std::make_move_iterator(slots_.end()));
    bigger.insert(bigger.end(), first, at);
    bigger.resize(capacity);
    slots_ = std::move(bigger);
    capacity_ = slots_.size();
    head_ = 0;
  }

  std::vector<T> slots_;  // a power of two long
  std::size_t capacity_ = 0;  // slots_.size(), kept: that divides by sizeof(T) at every access
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
