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
#include "ferry/model/command_slab.hpp"
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

  /// Queues the ready command `c` with its priority now (again, if it rose).
  void push(const Command& c) {
    queues_[static_cast<std::size_t>(c.klass)].push(c.bottom, c.fanout, c.id, c.slot);
  }

  /// The command in `slot` is now known to the model: under critical_path, it lengthens the
  /// remaining path of its unstarted ancestors and adds to its inputs' successor counts.
  void released(CommandSlab& slab, std::uint64_t slot) {
    if (policy_ != SchedulePolicy::critical_path) return;
    Command& c = slab[slot];
    c.bottom = c.duration;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      Command& in = slab[c.inputs[i]];
      ++in.fanout;
      if (in.state == Command::State::ready) push(in);  // its tie-break changed
    }
    raise_ancestors(slab, slot);
  }

  /// Whether priorities were left to be recomputed (see kWalkBudget).
  bool stale() const noexcept { return stale_; }

  /// Recomputes every unstarted command's remaining path in one pass, newest first (submission
  /// order is a topological order), over the graph known now; then rebuilds the queues.
  void recompute(CommandSlab& slab, const Ring<std::uint32_t>& live) {
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
  void rebuild(const CommandSlab& slab, const Ring<std::uint32_t>& live) {
    for (ReadyQueue& q : queues_) q.clear();
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (const Command& c = slab[live[i]]; c.state == Command::State::ready) push(c);
    }
  }

 private:
  // Raising priorities walks up the unstarted ancestors of each new command. A long unstarted
  // chain would make that quadratic, so past this many visits the walk stops and priorities
  // are recomputed in one pass when a contested choice next needs them.
  static constexpr std::size_t kWalkBudget = 64;
  static constexpr Duration kNotRaised{-1};  // what raise_ancestors' rule returns for no raise

  void raise_ancestors(CommandSlab& slab, std::uint64_t from) {
    // A depth-first walk, on a fixed stack (each raise stacks at most one command, so it never
    // holds more than the budget) over the commands by address: this runs for every release.
    // The input raised last is walked next without going through the stack, and a path of
    // commands with one input each (a chain: the common case) is a loop of its own.
    std::array<Command*, kWalkBudget> walk;
    std::size_t top = 0;
    std::size_t budget = kWalkBudget;  // raises left
    bool spent = false;
    // Lengthens the remaining path of `in` to its duration plus `below`, if that is longer and
    // it has not started; a ready one is queued again. Returns its new remaining path, or
    // kNotRaised if not, or if the budget is spent (then stale_).
    const auto raise = [&](Command& in, Duration below) {
      const Duration path = in.duration + below;
      if (in.bottom >= path || in.started()) return kNotRaised;
      if (budget == 0) {
        spent = stale_ = true;
        return kNotRaised;
      }
      --budget;
      in.bottom = path;
      if (in.state == Command::State::ready) push(in);
      return path;
    };
    Command* x = &slab[from];
    for (;;) {
      Duration below = x->bottom;
      bool path_ended = false;
      while (Command* in = x->sole_input) {
        const Duration path = in->duration + below;
        if (in->bottom < path && in->state < Command::State::ready && budget > 0) {
          // raise() for the common case, a command not ready yet with budget left: two
          // compares fewer for each of the up to 64 visits of every release
          --budget;
          in->bottom = below = path;
        } else if ((below = raise(*in, below)) == kNotRaised) {
          path_ended = true;
          break;
        }
        x = in;
      }
      Command* next = nullptr;
      if (!path_ended) {  // x has no input, or several
        for (std::size_t i = 0; i < x->inputs.size(); ++i) {
          Command& in = slab[x->inputs[i]];
          if (raise(in, below) == kNotRaised) continue;
          if (next != nullptr) walk[top++] = next;
          next = &in;
        }
      }
      if (spent) return;
      if (next == nullptr) {
        if (top == 0) return;
        next = walk[--top];
      }
      x = next;
    }
  }

  SchedulePolicy policy_;
  std::array<ReadyQueue, kEngineClasses> queues_;
  bool stale_ = false;
};

}  // namespace ferry::detail
