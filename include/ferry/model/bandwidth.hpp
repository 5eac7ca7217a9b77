#pragma once
// BandwidthShare: the memory bandwidth that running work shares, as an event-driven fluid.
// Each pool (DRAM, L2) gives its capacity to the flows drawing on it: every flow its demand
// when the demands fit, otherwise a max-min fair share (water-filling: flows asking less than
// an equal share get what they ask, the rest split what is left). Whenever a pool's set of
// flows changes, the flows whose share changed are advanced to now at their old rate and
// re-timed at the new one; the caller re-schedules their completions. A flow that leaves an
// oversubscribed pool only marks it: the pool is shared anew when a flow enters it or, at the
// end of the instant, by settle(). A kernel ending as the next one starts (a fan-out on a
// device whose units ask more than its DRAM gives) would otherwise re-time every other flow
// twice at one instant, away from its share and back to it.
//
// A flow's progress is the fraction of its work still to do; its rate is 1 / work_ns at its
// share. While a pool's demands fit, a flow joining or leaving changes nobody else's share, so
// the common case costs O(log flows); an oversubscribed pool costs O(flows) per change.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/cost_model.hpp"

namespace ferry::detail {

class BandwidthShare {
 public:
  explicit BandwidthShare(const DeviceSpec& spec) : capacity_(pool_capacity(spec)) {}

  /// The flow in `slot` starts its work at `now` on its units. Appends to `retimed` every
  /// running flow whose end moved (the new one included); their Command::end_at says when.
  void join(CommandSlab& slab, std::uint32_t slot, Duration now,
            std::vector<std::uint32_t>& retimed) {
    slab[slot].remaining = 1;
    enter(slab, slot, now, retimed);
  }

  /// The flow in `slot` gets `units` units from `now` on: what is left of it (its tiles not
  /// done, their share of its bytes) is timed anew as a kernel of its own.
  void regrow(CommandSlab& slab, std::uint32_t slot, std::int64_t units, Duration now,
              std::vector<std::uint32_t>& retimed) {
    Command& c = slab[slot];
    const double left = c.left_at(now);
    leave(slab, slot);
    c.plan.tiles = tiles_left(c.plan.tiles, left);
    c.plan.shared_bytes *= left;
    c.plan.local_ns *= left;
    c.units = units;
    c.remaining = 1;
    enter(slab, slot, now, retimed);
  }

  /// The tiles not done of `tiles` when `left` of the work remains (at least one).
  static std::int64_t tiles_left(std::int64_t tiles, double left) noexcept {
    const double t = std::ceil(left * static_cast<double>(tiles) - 1e-6);
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(t), 1, tiles);
  }

  /// The flow in `slot` is done (or changes its units): the others may get more.
  void leave(CommandSlab& slab, std::uint32_t slot) {
    Command& c = slab[slot];
    if (c.plan.pool == Pool::none) return;
    const double cap = capacity_of(c);
    Flows& p = pools_[static_cast<std::size_t>(c.plan.pool)];
    const bool fitted = p.demand <= cap;
    p.flows.erase(std::lower_bound(p.flows.begin(), p.flows.end(), slot, ByDemand{slab}));
    p.demand -= c.demand;
    if (p.flows.empty()) p.demand = 0;  // no drift left over from sums of doubles
    if (!fitted) p.pending = true;  // the others may get more: shared by enter() or settle()
  }

  /// Whether a pool waits for settle().
  bool pending() const noexcept {
    return std::any_of(pools_.begin(), pools_.end(), [](const Flows& p) { return p.pending; });
  }

  /// Shares anew each pool a flow left at this instant (and none entered since): the caller
  /// calls it before its clock moves on. Appends the flows re-timed, as join() does.
  void settle(CommandSlab& slab, Duration now, std::vector<std::uint32_t>& retimed) {
    for (std::size_t i = 0; i < kPools; ++i) {
      if (pools_[i].pending) share(slab, pools_[i], capacity_[i], now, retimed);
    }
  }

  /// Bytes per ns the flows of each pool are given now (for the trace's counters).
  double in_use(std::size_t pool) const noexcept {
    return std::min(pools_[pool].demand, capacity_[pool]);
  }

 private:
  /// The flow in `slot` starts drawing on its pool at `now`, with `remaining` of its work left.
  void enter(CommandSlab& slab, std::uint32_t slot, Duration now,
             std::vector<std::uint32_t>& retimed) {
    Command& c = slab[slot];
    c.since = now;
    c.rate = 0;
    c.bandwidth = -1;  // no share yet
    if (c.plan.pool == Pool::none) {
      time(c, now, std::numeric_limits<double>::infinity());
      retimed.push_back(slot);
      return;
    }
    Flows& p = pools_[static_cast<std::size_t>(c.plan.pool)];
    const bool fitted = p.demand <= capacity_of(c);
    // No flow can draw more than its pool holds. A kernel with no compute to hide its traffic
    // behind asks for an unbounded rate, and an infinite demand would turn the pool's sum into
    // inf - inf = NaN when it leaves (a NaN the trace's bandwidth counter once printed).
    c.demand = std::min(c.plan.demand(c.units), capacity_of(c));
    p.demand += c.demand;
    p.flows.insert(std::lower_bound(p.flows.begin(), p.flows.end(), slot, ByDemand{slab}), slot);
    if (fitted && !p.pending && p.demand <= capacity_of(c)) {
      time(c, now, c.demand);  // nobody else's share changes
      retimed.push_back(slot);
      return;
    }
    share(slab, p, capacity_of(c), now, retimed);
  }

  struct Flows {
    std::vector<std::uint32_t> flows;  // in water-filling order: see ByDemand
    double demand = 0;  // the sum of the flows' demands
    bool pending = false;  // a flow left while it was oversubscribed: not shared anew yet
  };

  /// The order water-filling visits flows in: smallest demand first, then submission order.
  /// Flows are kept in it as they join, so a share costs no sort.
  struct ByDemand {
    const CommandSlab& slab;
    bool operator()(std::uint32_t a, std::uint32_t b) const noexcept {
      return slab[a].demand != slab[b].demand ? slab[a].demand < slab[b].demand
                                              : slab[a].id < slab[b].id;
    }
  };

  double capacity_of(const Command& c) const noexcept {
    return capacity_[static_cast<std::size_t>(c.plan.pool)];
  }

  /// The flow's end if it runs from `now` at `bandwidth`, the part done so far already counted.
  static void time(Command& c, Duration now, double bandwidth) {
    c.bandwidth = bandwidth;
    const double work = c.plan.work_ns(c.units, bandwidth);
    c.rate = work > 0 ? 1 / work : 0;
    c.since = now;
    c.end_at = now + (work > 0 ? ns_up(c.remaining * work) : Duration::zero());
  }

  /// Water-fills `capacity` over the flows of `p` and re-times those whose share changed.
  void share(CommandSlab& slab, Flows& p, double capacity, Duration now,
             std::vector<std::uint32_t>& retimed) {
    p.pending = false;
    double left = capacity;
    std::size_t count = p.flows.size();
    for (std::uint32_t slot : p.flows) {
      Command& c = slab[slot];
      const double given = std::min(c.demand, left / static_cast<double>(count));
      left -= given;
      --count;
      if (given == c.bandwidth) continue;
      // Advance the work done at the old share, then time the rest at the new one.
      c.remaining = c.left_at(now);
      time(c, now, given);
      retimed.push_back(slot);
    }
  }

  std::array<double, kPools> capacity_;
  std::array<Flows, kPools> pools_;
};

}  // namespace ferry::detail
