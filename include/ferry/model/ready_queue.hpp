#pragma once
// ReadyQueue: the commands of one engine class that may start, best first by the policy.
// An entry is a snapshot of a command's priority; when a priority rises the command is pushed
// again and its old entry is skipped when it surfaces (the simulator checks).
//
// Entries mostly arrive in the order they leave: a fan-out's commands become ready one after
// another with equal priorities, so each later one is worse. Such an entry goes to the back of
// a sorted lane (O(1) in and out, where a heap of N entries costs O(log N) comparisons a pop).
// The other common order is the reverse: a fan-out's source, ready while its readers are
// released, is queued again at each with one more successor, each entry better than the one
// before; such an entry goes to the lane's front. Only an entry that would land inside the lane
// goes to the heap, and the better of the two fronts leaves first. The order is a strict one (ids
// are unique), so which entries leave when is exactly that of one heap.
//
// The critical-path order is CP/MISF (Kasahara and Narita, 1984): the longest remaining path
// first, and among equals the one with the most immediate successors, whose completion makes
// the most work ready.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/model/ring.hpp"
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
    const Entry e{bottom, fanout, slot, id};
    if (lane_.empty() || !Worse{policy_}(lane_.back(), e)) {
      lane_.emplace_back() = e;  // not better than the lane's last: it leaves after it
      return;
    }
    if (Worse{policy_}(lane_.front(), e)) {
      lane_.emplace_front() = e;  // better than the lane's first: it leaves before it
      return;
    }
    push_heap(e);
  }
  /// If the queue's one entry is that of command `id` in `slot`, gives it `bottom` and
  /// `fanout` in place and returns true: the order of one entry is the same whatever its
  /// priority, and an entry pushed beside it would be a second one for a single command.
  bool update_sole(Duration bottom, std::uint32_t fanout, std::uint64_t id, std::uint32_t slot) {
    if (size() != 1) return false;
    Entry& e = heap_.empty() ? lane_.front() : heap_.front();
    if (e.slot != slot || e.id != id) return false;
    e.bottom = bottom;
    e.fanout = fanout;
    return true;
  }
  bool empty() const noexcept { return heap_.empty() && lane_.empty(); }
  /// Entries, counting stale ones: an upper bound on the commands waiting.
  std::size_t size() const noexcept { return heap_.size() + lane_.size(); }
  const Entry& top() const noexcept { return from_heap() ? heap_.front() : lane_.front(); }
  void pop() {
    if (from_heap()) {
      std::pop_heap(heap_.begin(), heap_.end(), Worse{policy_});
      heap_.pop_back();
    } else {
      lane_.pop_front();
    }
  }
  void clear() noexcept {
    heap_.clear();
    lane_.clear();
  }

 private:
  /// Out of line, the rare case: inlined, it kept push from being inlined.
  [[gnu::noinline]] void push_heap(const Entry& e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), Worse{policy_});
  }

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

  /// Whether the best entry is the heap's (the lane's otherwise; not both empty).
  bool from_heap() const noexcept {
    return lane_.empty() || (!heap_.empty() && !Worse{policy_}(heap_.front(), lane_.front()));
  }

  SchedulePolicy policy_;
  std::vector<Entry> heap_;
  Ring<Entry> lane_;  // best first, each entry not better than the one before
};

}  // namespace ferry::detail
