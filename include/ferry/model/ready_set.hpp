#pragma once
// ReadySet: the ready commands of every engine class, best first by the policy, and for
// critical_path the priorities they are ranked by: each unstarted command's remaining path
// (its duration plus the longest remaining path of the successors known so far).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/ready_queue.hpp"
#include "ferry/model/ring.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

class ReadySet {
 public:
  explicit ReadySet(SchedulePolicy policy)
      : policy_(policy),
        queues_{ReadyQueue(policy), ReadyQueue(policy), ReadyQueue(policy), ReadyQueue(policy)} {}

  ReadyQueue& of(std::size_t engine_class) noexcept { return queues_[engine_class]; }

  /// Queues the ready command in `slot` with its priority now (again, if it rose).
  void push(const std::vector<Command>& slab, std::uint64_t slot) {
    const Command& c = slab[slot];
    queues_[static_cast<std::size_t>(c.klass)].push(c.bottom, c.fanout, c.id,
                                                    static_cast<std::uint32_t>(slot));
  }

  /// The command in `slot` is now known to the model: under critical_path, it lengthens the
  /// remaining path of its unstarted ancestors and adds to its inputs' successor counts.
  void released(std::vector<Command>& slab, std::uint64_t slot) {
    if (policy_ != SchedulePolicy::critical_path) return;
    Command& c = slab[slot];
    c.bottom = c.duration;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      Command& in = slab[c.inputs[i]];
      ++in.fanout;
      if (in.state == Command::State::ready) push(slab, c.inputs[i]);  // its tie-break changed
    }
    raise_ancestors(slab, slot);
  }

  /// Whether priorities were left to be recomputed (see kWalkBudget).
  bool stale() const noexcept { return stale_; }

  /// Recomputes every unstarted command's remaining path in one pass, newest first (submission
  /// order is a topological order), over the graph known now; then rebuilds the queues.
  void recompute(std::vector<Command>& slab, const Ring<std::uint32_t>& live) {
    for (std::size_t i = live.size(); i-- > 0;) {
      Command& c = slab[live[i]];
      if (c.started() || c.state == Command::State::submitted) continue;
      Duration longest{};
      for (std::size_t k = 0; k < c.successors.size(); ++k) {
        const Command& s = slab[c.successors[k]];
        if (s.state != Command::State::submitted) longest = std::max(longest, s.bottom);
      }
      c.bottom = c.duration + longest;
    }
    rebuild(slab, live);
    stale_ = false;
  }

  /// Queues every ready command of `live` afresh, dropping stale entries.
  void rebuild(const std::vector<Command>& slab, const Ring<std::uint32_t>& live) {
    for (ReadyQueue& q : queues_) q.clear();
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (slab[live[i]].state == Command::State::ready) push(slab, live[i]);
    }
  }

 private:
  // Raising priorities walks up the unstarted ancestors of each new command. A long unstarted
  // chain would make that quadratic, so past this many visits the walk stops and priorities
  // are recomputed in one pass when a contested choice next needs them.
  static constexpr std::size_t kWalkBudget = 64;

  void raise_ancestors(std::vector<Command>& slab, std::uint64_t from) {
    walk_.clear();
    walk_.push_back(from);
    std::size_t visits = 0;
    while (!walk_.empty()) {
      const Command& x = slab[walk_.back()];
      walk_.pop_back();
      for (std::size_t i = 0; i < x.inputs.size(); ++i) {
        const std::uint64_t in_slot = x.inputs[i];
        Command& in = slab[in_slot];
        if (in.started() || in.bottom >= in.duration + x.bottom) continue;
        if (++visits > kWalkBudget) {
          stale_ = true;
          return;
        }
        in.bottom = in.duration + x.bottom;
        if (in.state == Command::State::ready) push(slab, in_slot);
        walk_.push_back(in_slot);
      }
    }
  }

  SchedulePolicy policy_;
  std::array<ReadyQueue, kEngineClasses> queues_;
  std::vector<std::uint64_t> walk_;  // scratch
  bool stale_ = false;
};

}  // namespace ferry::detail
