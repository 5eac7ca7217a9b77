#pragma once
// EventQueue: what the simulator waits for, in modeled time. The device's events (a command
// completes, another device's data arrives) come out by time, ties in the order they were
// pushed; the host's (a command released, a handle dropped) in the order of the host's calls,
// which is also their time order.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/model/ring.hpp"

namespace ferry::detail {

class EventQueue {
 public:
  enum class Kind : std::uint8_t {
    complete,     // device: a command ends (if its generation is still current)
    work_begins,  // device: a started command's latency is over: its work draws on memory
    arrival,      // device: the data of a transfer reached this device
    read_done,    // device: a transfer to another device has finished reading a buffer
    release,      // host: a submitted command reaches the model
    drop_handle,  // host: the last handle of a command is gone
  };
  struct Event {
    Duration time;
    std::uint64_t slot;
    Kind kind;
    std::uint32_t generation = 0;
  };
  static constexpr Duration kNever = Duration::max();

  void push_device(Duration time, std::uint64_t slot, Kind kind, std::uint32_t generation = 0) {
    const Queued q{time, seq_++, slot, kind, generation};
    // Later than everything in the lane (a push is always after it among equal times): at its
    // back; earlier than all of it: at its front; else in the heap.
    if (lane_.empty() || q.time >= lane_.back().time) {
      lane_.emplace_back() = q;
    } else if (q.time < lane_.front().time) {
      lane_.emplace_front() = q;
    } else {
      push_heap(q);
    }
  }
  void push_host(Duration time, std::uint64_t slot, Kind kind) {
    host_.emplace_back() = {time, slot, kind, 0};
  }
  bool device_idle() const noexcept { return heap_.empty() && lane_.empty(); }
  /// How many host events wait for the model's clock to reach them.
  std::size_t host_waiting() const noexcept { return host_.size(); }

  /// When the next event happens, none earlier than `now`: a host event whose time has passed
  /// is due now. kNever if there is none.
  Duration next(Duration now) const noexcept {
    Duration t = device_idle() ? kNever : first().time;
    if (!host_.empty()) t = std::min(t, std::max(host_.front().time, now));
    return t;
  }

  /// Whether the next device event is at `t` and of kind `k`.
  bool next_device_is(Duration t, Kind k) const noexcept {
    return !device_idle() && first().time == t && first().kind == k;
  }

  /// Takes the next device event at exactly `t` into `e`; false if there is none.
  bool pop_device(Duration t, Event& e) {
    if (device_idle() || first().time != t) return false;
    const Queued& q = first();
    e = {q.time, q.slot, q.kind, q.generation};
    if (from_heap()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
      heap_.pop_back();
    } else {
      lane_.pop_front();
    }
    return true;
  }

  /// Takes the next host event due by `t` into `e`; false if there is none.
  bool pop_host(Duration t, Event& e) {
    if (host_.empty() || host_.front().time > t) return false;
    e = host_.front();
    host_.pop_front();
    return true;
  }

 private:
  struct Queued;
  /// Out of line, the rare case: inlined, it kept push_device (some eight calls a fan-out
  /// element) from being inlined.
  [[gnu::noinline]] void push_heap(const Queued& q) {
    heap_.push_back(q);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
  }

  struct Queued {
    Duration time;
    std::uint64_t seq;  // ties broken by push order: deterministic
    std::uint64_t slot;
    Kind kind;
    std::uint32_t generation;
    bool operator>(const Queued& o) const noexcept {
      return time != o.time ? time > o.time : seq > o.seq;
    }
  };
  /// Whether the first device event is the heap's (the lane's otherwise; not both empty).
  bool from_heap() const noexcept {
    return lane_.empty() || (!heap_.empty() && lane_.front() > heap_.front());
  }
  const Queued& first() const noexcept { return from_heap() ? heap_.front() : lane_.front(); }

  // The device's events, first by (time, seq): most are pushed in that order (a completion
  // after the ones pushed before it), which a sorted lane takes in O(1); the rest wait in a
  // heap (a min-heap: std::greater), and the earlier of the two fronts comes out first.
  std::vector<Queued> heap_;
  Ring<Queued> lane_;
  Ring<Event> host_;
  std::uint64_t seq_ = 0;
};

}  // namespace ferry::detail
