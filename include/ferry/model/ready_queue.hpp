#pragma once
// ReadyQueue: the commands of one engine class that may start, best first by the policy.
// An entry is a snapshot of a command's priority; when a priority rises the command is pushed
// again and its old entry is skipped when it surfaces (the simulator checks).
//
// The critical-path order is CP/MISF (Kasahara and Narita, 1984): the longest remaining path
// first, and among equals the one with the most immediate successors, whose completion makes
// the most work ready.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/model/spec.hpp"

namespace ferry::detail {

class ReadyQueue {
 public:
  struct Entry {
    Duration bottom;       // the command's remaining path when pushed
    std::uint32_t fanout;  // its known successors when pushed
    std::uint32_t slot;    // where the simulator keeps it
    std::uint64_t id;      // its submission number: the last tie-break, and FIFO's order
  };

  explicit ReadyQueue(SchedulePolicy policy) : policy_(policy) {}

  void push(Duration bottom, std::uint32_t fanout, std::uint64_t id, std::uint32_t slot) {
    heap_.push_back({bottom, fanout, slot, id});
    std::push_heap(heap_.begin(), heap_.end(), Worse{policy_});
  }
  bool empty() const noexcept { return heap_.empty(); }
  /// Entries, counting stale ones: an upper bound on the commands waiting.
  std::size_t size() const noexcept { return heap_.size(); }
  const Entry& top() const noexcept { return heap_.front(); }
  void pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Worse{policy_});
    heap_.pop_back();
  }
  void clear() noexcept { heap_.clear(); }

 private:
  /// Heap order: true when `a` should come out after `b`. FIFO: lower ids (earlier submissions)
  /// first. Critical path: longer remaining paths first, then more successors, then earlier
  /// submissions.
  struct Worse {
    SchedulePolicy policy;
    bool operator()(const Entry& a, const Entry& b) const noexcept {
      if (policy == SchedulePolicy::critical_path) {
        if (a.bottom != b.bottom) return a.bottom < b.bottom;
        if (a.fanout != b.fanout) return a.fanout < b.fanout;
      }
      return a.id > b.id;
    }
  };

  SchedulePolicy policy_;
  std::vector<Entry> heap_;
};

}  // namespace ferry::detail
