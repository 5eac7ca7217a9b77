#pragma once
// InlineList<T, N>: a list whose first N elements live inside it, the rest on the heap. A
// collective builds a few small lists for every member on every call (where each member's data
// lies, the arrays it reads); as std::vectors each cost an allocation and a release, a few
// hundred instructions, where the model's own work for the step they describe is a few
// thousand. Beyond N it holds every element in one std::vector. (Also the input lists of the
// collectives' steps: one entry a member.)

#include <array>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class T, std::size_t N>
class InlineList {
 public:
  InlineList() = default;
  /// `n` default-made elements.
  explicit InlineList(std::size_t n) { resize(n); }
  InlineList(const InlineList&) = default;
  InlineList& operator=(const InlineList&) = default;
  /// A moved-from list is empty (its size is not left to name elements it no longer holds).
  InlineList(InlineList&& o) noexcept
      : few_(std::move(o.few_)), many_(std::move(o.many_)), size_(std::exchange(o.size_, 0)) {}
  InlineList& operator=(InlineList&& o) noexcept {
    few_ = std::move(o.few_);
    many_ = std::move(o.many_);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  T& back() noexcept { return data()[size_ - 1]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  std::span<const T> span() const noexcept { return {data(), size_}; }

  void push_back(T x) {
    if (size_ < N) {
      few_[size_] = std::move(x);
    } else {
      if (size_ == N) spill(2 * N);
      many_.push_back(std::move(x));
    }
    ++size_;
  }

  template <class... Args>
  void emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
  }

  /// Empty again: what it held is let go of now (a list reused keeps its room).
  void clear() {
    if (size_ > N) {
      many_.clear();
    } else {
      for (std::size_t i = 0; i < size_; ++i) few_[i] = T{};
    }
    size_ = 0;
  }

  /// Grows to `n` elements (n >= size()), the new ones default-made.
  void resize(std::size_t n) {
    if (n > N) {
      if (size_ <= N) spill(n);
      many_.resize(n);
    } else {
      for (std::size_t i = size_; i < n; ++i) few_[i] = T{};
    }
    size_ = n;
  }

 private:
  T* data() noexcept { return size_ > N ? many_.data() : few_.data(); }
  const T* data() const noexcept { return size_ > N ? many_.data() : few_.data(); }

  /// Moves the N inline elements to the heap, with room for `capacity`.
  void spill(std::size_t capacity) {
    many_.reserve(capacity);
    for (std::size_t i = 0; i < size_; ++i) many_.push_back(std::exchange(few_[i], T{}));
  }

  std::array<T, N> few_{};
  std::vector<T> many_;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
