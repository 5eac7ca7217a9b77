#pragma once
// EventQueue: what the simulator waits for, in modeled time. The device's events (a command
// completes, another device's data arrives) come out by time, ties in the order they were
// pushed; the host's (a command released, a handle dropped) in the order of the host's calls,
// which is also their time order.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
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
    device_.push({time, seq_++, slot, kind, generation});
  }
  void push_host(Duration time, std::uint64_t slot, Kind kind) {
    host_.emplace_back() = {time, slot, kind, 0};
  }
  bool device_idle() const noexcept { return device_.empty(); }
  /// How many host events wait for the model's clock to reach them.
  std::size_t host_waiting() const noexcept { return host_.size(); }

  /// When the next event happens, none earlier than `now`: a host event whose time has passed
  /// is due now. kNever if there is none.
  Duration next(Duration now) const noexcept {
    Duration t = device_.empty() ? kNever : device_.top().time;
    if (!host_.empty()) t = std::min(t, std::max(host_.front().time, now));
    return t;
  }

  /// Takes the next device event at exactly `t` into `e`; false if there is none.
  bool pop_device(Duration t, Event& e) {
    if (device_.empty() || device_.top().time != t) return false;
    const Queued& q = device_.top();
    e = {q.time, q.slot, q.kind, q.generation};
    device_.pop();
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
  std::priority_queue<Queued, std::vector<Queued>, std::greater<>> device_;
  Ring<Event> host_;
  std::uint64_t seq_ = 0;
};

}  // namespace ferry::detail
