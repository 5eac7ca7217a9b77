#pragma once
// ReadySet: the ready commands of every engine class, best first by the policy, and for
// critical_path the priorities they are ranked by: each unstarted command's remaining path
// (its duration plus the longest remaining path of its released successors), exact whenever
// it decides which of several ready commands starts first.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/ready_queue.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

class ReadySet {
 public:
  explicit ReadySet(SchedulePolicy policy)
      : policy_(policy),
        queues_{ReadyQueue(policy), ReadyQueue(policy), ReadyQueue(policy), ReadyQueue(policy)} {}

  ReadyQueue& of(std::size_t engine_class) noexcept { return queues_[engine_class]; }

  /// Queues the ready command `c` with its priority now (again, if it changed). `c` takes an
  /// engine: a command of no class (a view) is never queued.
  void push(const Command& c) {
    queues_[static_cast<std::size_t>(c.klass)].push(c.bottom, c.fanout, c.id, c.slot);
  }

  /// Queues `c`, which has just become ready; a priority left to compute is computed when a
  /// choice needs it (see refresh).
  void became_ready(const CommandSlab& slab, const Command& c) {
    if (c.stale_bottom) note(slab, c.slot);
    push(c);
  }

  /// The command in `slot` is now known to the model: under critical_path, it may lengthen
  /// the remaining path of its unstarted ancestors, and it adds to its inputs' successor counts.
  ///
  /// The remaining paths are not raised here: that walk would visit every unstarted ancestor
  /// at every release (a chain the device has not reached yet is all of them). The ancestors
  /// are marked stale instead, and the walk stops at one already stale: every unstarted
  /// ancestor of a stale command is stale too (see settle), so a chain marks one command a
  /// release. refresh() computes what a choice needs.
  void released(CommandSlab& slab, std::uint64_t slot) {
    if (policy_ != SchedulePolicy::critical_path) return;
    Command& c = slab[slot];
    c.bottom = c.duration;  // no successor released yet: exact
    c.stale_bottom = false;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      Command& in = slab[c.inputs[i]];
      ++in.fanout;
      // Its tie-break changed. Alone in its queue (a chain's next command, ready as the rest
      // of the chain is released), its entry changes in place: two entries of one command
      // would make the next choice look like one among two, and refresh() would settle the
      // remaining path of the whole chain for it.
      if (in.state == Command::State::ready &&
          !queues_[static_cast<std::size_t>(in.klass)].update_sole(in.bottom, in.fanout, in.id,
                                                                   in.slot)) {
        push(in);
      }
    }
    mark_ancestors(slab, c);
  }

  /// Makes the priority of every ready command exact (those whose remaining path may have
  /// grown since they were queued), queueing again each whose priority rose. The scheduler
  /// calls it before a choice among more ready commands than free engines.
  void refresh(CommandSlab& slab) {
    if (stale_ready_.empty()) return;
    for (std::size_t i = 0; i < stale_ready_.size(); ++i) {
      Command& c = slab[stale_ready_[i]];
      if (c.state != Command::State::ready || !c.stale_bottom) continue;  // settled, or gone
      settle(slab, c);
    }
    stale_ready_.clear();
  }

  /// Queues every ready command of `slab` afresh, dropping stale entries. (A slot no command
  /// holds keeps its last command, done.)
  void rebuild(const CommandSlab& slab) {
    for (ReadyQueue& q : queues_) q.clear();
    for (std::size_t slot = 0; slot < slab.size(); ++slot) {
      if (const Command& c = slab[slot]; c.state == Command::State::ready) push(c);
    }
  }

  /// Whether no command is ready: every ready command has an entry in its class's queue.
  bool none_ready() const noexcept {
    return std::all_of(queues_.begin(), queues_.end(),
                       [](const ReadyQueue& q) { return q.empty(); });
  }

 private:
  /// Marks stale the unstarted ancestors of `c` that are not yet, noting the ready ones.
  void mark_ancestors(CommandSlab& slab, Command& c) {
    // A chain (one input each: the common case) follows sole_input by address; other commands
    // use the stack, which holds each command at most once between two refreshes.
    Command* x = &c;
    for (;;) {
      while (Command* in = x->sole_input) {
        if (in->stale_bottom || in->started()) break;
        mark(slab, *in);
        x = in;
      }
      if (x->sole_input == nullptr) {
        for (std::size_t i = 0; i < x->inputs.size(); ++i) {
          Command& in = slab[x->inputs[i]];
          if (in.stale_bottom || in.started()) continue;
          mark(slab, in);
          walk_.push_back(&in);
        }
      }
      if (walk_.empty()) return;
      x = walk_.back();
      walk_.pop_back();
    }
  }

  void mark(const CommandSlab& slab, Command& c) {
    c.stale_bottom = true;
    if (c.state == Command::State::ready) note(slab, c.slot);
  }

  /// Notes a ready command whose priority is stale. Where no choice ever needs a refresh (a
  /// chain's next command is ready and stale at every step), the notes would pile up: at each
  /// doubling, those that started meanwhile are dropped, which keeps the list as long as the
  /// stale ready commands, amortized O(1) a note.
  void note(const CommandSlab& slab, std::uint32_t slot) {
    if (stale_ready_.size() >= compact_at_) {
      std::erase_if(stale_ready_, [&](std::uint32_t s) {
        const Command& c = slab[s];
        return c.state != Command::State::ready || !c.stale_bottom;
      });
      compact_at_ = std::max(kFirstCompaction, 2 * stale_ready_.size());
    }
    stale_ready_.push_back(slot);
  }

  /// Computes the remaining path of the stale command `root` and of the stale commands below
  /// it, successors first (depth first on a stack: a chain may be long), and marks them exact.
  /// What is settled is closed downwards among the stale, so what stays stale keeps every
  /// unstarted ancestor stale: mark_ancestors may stop at the first stale one it meets.
  void settle(CommandSlab& slab, Command& root) {
    settle_.push_back({&root, 0});
    while (!settle_.empty()) {
      auto& [x, next] = settle_.back();
      bool descended = false;
      while (next < x->successors.size()) {
        Command& s = slab[x->successors[next++]];
        if (s.stale_bottom && s.state != Command::State::submitted && !s.started()) {
          settle_.push_back({&s, 0});  // invalidates x and next: go round again
          descended = true;
          break;
        }
      }
      if (descended) continue;
      Command& done = *x;
      settle_.pop_back();
      Duration longest{};
      for (std::size_t k = 0; k < done.successors.size(); ++k) {
        const Command& s = slab[done.successors[k]];
        if (s.state != Command::State::submitted) longest = std::max(longest, s.bottom);
      }
      const Duration bottom = done.duration + longest;
      done.stale_bottom = false;
      if (bottom == done.bottom) continue;
      done.bottom = bottom;
      if (done.state == Command::State::ready) push(done);  // one entry per change
    }
  }

  SchedulePolicy policy_;
  std::array<ReadyQueue, kEngineClasses> queues_;
  static constexpr std::size_t kFirstCompaction = 64;
  std::vector<std::uint32_t> stale_ready_;  // ready commands marked stale since the last refresh
  std::size_t compact_at_ = kFirstCompaction;
  std::vector<Command*> walk_;
  std::vector<std::pair<Command*, std::size_t>> settle_;
};

}  // namespace ferry::detail
