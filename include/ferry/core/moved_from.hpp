#pragma once
// Whether an object was moved from. A class whose moved-from state would read what went with
// the move (a module's parameters, an optimizer's state) holds one and checks it where it is
// used, so that a call on such an object is a clear error rather than a crash. The class's own
// move operations stay defaulted: the mark's move is what marks the source.

#include <utility>

namespace ferry::detail {

class MovedFromMark {
 public:
  MovedFromMark() noexcept = default;
  // A copy of a moved-from object is as empty as its source.
  MovedFromMark(const MovedFromMark&) noexcept = default;
  MovedFromMark& operator=(const MovedFromMark&) noexcept = default;
  MovedFromMark(MovedFromMark&& other) noexcept : moved_(std::exchange(other.moved_, true)) {}
  MovedFromMark& operator=(MovedFromMark&& other) noexcept {
    moved_ = std::exchange(other.moved_, true);  // self-move keeps the old state
    return *this;
  }
  ~MovedFromMark() = default;

  bool moved_from() const noexcept { return moved_; }

 private:
  bool moved_ = false;
};

}  // namespace ferry::detail
