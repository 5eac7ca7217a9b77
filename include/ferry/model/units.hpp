#pragma once
// ComputeUnits: the units of a device's compute engine, shared by the kernels running on it.
// A kernel takes as many free units as its tiles can use when it starts; units freed later go
// first to running kernels that started with fewer, oldest first, as a real device's block
// scheduler hands a freed unit to the next tile of the kernels already launched.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ferry/model/bandwidth.hpp"
#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/horizon.hpp"

namespace ferry::detail {

class ComputeUnits {
 public:
  explicit ComputeUnits(std::int64_t units) : all_(units), free_(units) {}

  std::int64_t free() const noexcept { return free_; }
  std::int64_t in_use() const noexcept { return all_ - free_; }

  /// The kernel in `slot` starts: it takes its units (one for a fixed cost).
  void take(CommandSlab& slab, std::uint32_t slot) {
    Command& c = slab[slot];
    c.units = c.plan.is_fixed() ? 1 : c.plan.max_units(free_);
    free_ -= c.units;
    if (c.units < c.plan.max_units(all_)) growable_.push_back(slot);
  }

  /// The kernel in `slot` is done: its units come back.
  void give_back(CommandSlab& slab, std::uint32_t slot) {
    Command& c = slab[slot];
    if (!growable_.empty()) std::erase(growable_, slot);
    free_ += c.units;
    c.units = 0;
  }

  /// Hands free units to running kernels that could use more; appends the flows `share`
  /// re-timed to `retimed`. True if any kernel grew.
  bool grow(CommandSlab& slab, Duration now, BandwidthShare& share,
            std::vector<std::uint32_t>& retimed) {
    if (free_ == 0 || growable_.empty()) return false;
    bool grew = false;
    std::size_t kept = 0;
    for (std::uint32_t slot : growable_) {
      Command& c = slab[slot];
      const std::int64_t tiles =
          BandwidthShare::tiles_left(c.plan.tiles, c.working ? c.left_at(now) : 1.0);
      const std::int64_t more = std::min(free_, std::min(tiles, all_) - c.units);
      if (more > 0) {
        grew = true;
        free_ -= more;
        c.unheld = held_sum(c.unheld, Duration(held_product((now - c.taken).count(), more)));
        if (c.working) {
          share.regrow(slab, slot, c.units + more, now, retimed);  // the rest of its work, re-timed
        } else {
          c.units += more;  // still in its latency: its work starts on all of them
        }
      }
      if (c.units < c.plan.max_units(all_)) growable_[kept++] = slot;
    }
    growable_.resize(kept);
    return grew;
  }

 private:
  std::int64_t all_;
  std::int64_t free_;
  std::vector<std::uint32_t> growable_;  // running kernels holding fewer units than tiles
};

}  // namespace ferry::detail
