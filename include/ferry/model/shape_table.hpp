#pragma once
// ShapeTable: the shapes a model's labels have named, each stored once. A command's label and
// its trace slice hold a pointer into the table rather than a Shape of their own (120 bytes,
// with a trace's symbols): a long program keeps tens of thousands of labels and slices in
// flight, and on a mesh they outgrow the core's cache, so every byte a label or slice holds is
// a byte each command writes to memory it has not touched for a while. A device's program
// names the same few shapes over and over: the last shape found, then the last few kept, are
// compared first, before the sizes are hashed to look them up in the set.
//
// A program whose shapes keep changing (a decoder's sequence growing a token a step) names a
// new shape at every step, so the table sweeps itself: once it has doubled since its last sweep
// (and holds kSweepFloor shapes at least), the simulator lists the shapes its labels and kept
// slices still point to, and every other shape goes. The table then stays within twice what
// the commands in flight and the trace's slices can name, as the rest of the model does.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_set>
#include <vector>

#include "ferry/core/shape.hpp"

namespace ferry::detail {

/// What a label or slice that has no shape (a wait, a spill) points to.
inline const Shape kNoShape{};

class ShapeTable {
 public:
  /// A shape with the sizes `s` has now, which lives as long as the table. Reads the sizes
  /// without guarding them (a trace's label is not a use of its sizes).
  const Shape* intern(const Shape& s) {
    const std::span<const std::int64_t> sizes = ShapeAccess::sizes(s);
    if (same(recent_[last_], sizes)) return recent_[last_];
    for (std::size_t i = 0; i < kRecent; ++i) {
      if (same(recent_[i], sizes)) {
        last_ = i;
        return recent_[i];
      }
    }
    auto it = shapes_.find(sizes);
    if (it == shapes_.end()) it = shapes_.insert(ShapeAccess::plain(s)).first;
    last_ = next_;
    recent_[last_] = &*it;  // nodes never move: pointers stay valid as the set grows
    next_ = next_ + 1 == kRecent ? 0 : next_ + 1;
    return recent_[last_];
  }

  /// The shapes held now.
  std::size_t size() const noexcept { return shapes_.size(); }
  /// Whether the table has grown enough since its last sweep to sweep again.
  bool sweep_due() const noexcept { return shapes_.size() >= next_sweep_; }

  /// Keeps the shapes that `for_each_live(mark)` marks (it calls mark(p) for every shape
  /// pointer that may still be read; other pointers, stale ones among them, are ignored) and
  /// lets go of the rest. The pointers to the shapes kept stay valid.
  template <class ForEachLive>
  void sweep(ForEachLive&& for_each_live) {
    live_.clear();
    for_each_live([this](const Shape* p) { live_.push_back(p); });
    std::sort(live_.begin(), live_.end());
    for (auto it = shapes_.begin(); it != shapes_.end();) {
      if (std::binary_search(live_.begin(), live_.end(), &*it)) {
        ++it;
      } else {
        it = shapes_.erase(it);
      }
    }
    recent_.fill(nullptr);  // some may be gone
    next_ = 0;
    last_ = 0;
    next_sweep_ = std::max(kSweepFloor, 2 * shapes_.size());
    live_.clear();
  }

  /// The fewest shapes the table holds before it sweeps: a program of fixed shapes never does.
  static constexpr std::size_t kSweepFloor = 4096;

 private:
  using Sizes = std::span<const std::int64_t>;

  /// A loop, not std::ranges::equal: that calls memcmp, which costs more than the few sizes.
  static bool equal(Sizes a, Sizes b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
  static bool same(const Shape* kept, Sizes sizes) noexcept {
    return kept != nullptr && equal(ShapeAccess::sizes(*kept), sizes);
  }

  struct Hash {
    using is_transparent = void;
    std::size_t operator()(Sizes sizes) const noexcept {
      std::size_t h = sizes.size();
      for (const std::int64_t d : sizes) h = h * 1'000'003 ^ std::hash<std::int64_t>{}(d);
      return h;
    }
    std::size_t operator()(const Shape& s) const noexcept { return (*this)(ShapeAccess::sizes(s)); }
  };
  struct Equal {
    using is_transparent = void;
    bool operator()(Sizes a, const Shape& b) const noexcept {
      return equal(a, ShapeAccess::sizes(b));
    }
    bool operator()(const Shape& a, Sizes b) const noexcept { return (*this)(b, a); }
    bool operator()(const Shape& a, const Shape& b) const noexcept {
      return (*this)(ShapeAccess::sizes(a), b);
    }
  };
  std::unordered_set<Shape, Hash, Equal> shapes_;  // plain: no trace's symbols
  // The shapes kept last, replaced in turn: more than one layer's shapes.
  static constexpr std::size_t kRecent = 8;
  std::array<const Shape*, kRecent> recent_{};
  std::size_t next_ = 0;  // the one the next new shape replaces
  std::size_t last_ = 0;  // the last shape found: checked first (a chain keeps one shape)
  std::size_t next_sweep_ = kSweepFloor;  // the size at which the table sweeps again
  std::vector<const Shape*> live_;        // sweep's scratch: the shapes marked, sorted
};

}  // namespace ferry::detail
