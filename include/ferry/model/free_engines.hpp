#pragma once
// FreeEngines: the idle engines of one engine class, lowest number first. A command starts on
// the lowest-numbered free engine (its trace track), as a min-heap of engine numbers would
// give; a bit per engine makes each take and each return a few instructions where the heap's
// were dozens (a device with a hundred compute lanes takes and returns one per kernel).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::detail {

class FreeEngines {
 public:
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }

  /// The lowest-numbered free engine (not empty()).
  int top() const noexcept {
    std::size_t w = low_;
    while (words_[w] == 0) ++w;
    return static_cast<int>(w * 64 + static_cast<std::size_t>(std::countr_zero(words_[w])));
  }

  /// Takes top() out.
  void pop() noexcept {
    while (words_[low_] == 0) ++low_;
    words_[low_] &= words_[low_] - 1;  // clears the lowest set bit
    --count_;
  }

  /// Engine `engine` (not free now) is free.
  void push(int engine) {
    const auto e = static_cast<std::size_t>(engine);
    const std::size_t w = e / 64;
    if (w >= words_.size()) widen(w + 1);
    words_[w] |= std::uint64_t{1} << (e % 64);
    if (w < low_ || count_ == 0) low_ = w;
    ++count_;
  }

 private:
  /// Out of line: only the first engines of each word take it, and inlined it kept push (every
  /// command's completion) from being inlined.
  [[gnu::noinline]] void widen(std::size_t words) { words_.resize(words, 0); }

  std::vector<std::uint64_t> words_;  // bit e % 64 of word e / 64: engine e is free
  std::size_t low_ = 0;               // no free engine below word low_
  std::size_t count_ = 0;
};

}  // namespace ferry::detail
