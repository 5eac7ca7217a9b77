#pragma once
// Recovery: what the Scheduler (model/scheduler.hpp) does with a command the device cannot run
// (a fault, memory it can never have) and when nothing can happen until the host acts (a
// deadlock on memory, or commands nothing can read any more): run it on the host or fail it,
// as the spec's fallback says, and let the failure travel to what needed it.

#include <cstdint>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/model/scheduler.hpp"
#include "ferry/model/stuck.hpp"

namespace ferry::detail {

/// What make_ready() will certainly meet, known at submission (see its declaration).
inline void Scheduler::foresee_failure(Command& c) {
  c.fits = memory_.can_ever_fit(slab_, c);
  if (c.failure) {  // a transfer's: it has no inputs
    c.foreseen = c.failure;
    return;
  }
  if (c.foreseen || spec_.fallback == Fallback::host) return;
  if (c.fault) {
    c.foreseen = c.fault;
  } else if (!c.fits) {
    c.foreseen = out_of_memory(c.slot, memory_.never_fits(slab_, c));
  }
}

/// The device cannot run the command in `slot` (`error` says why): it runs on the host, or
/// fails, as the spec's fallback says.
inline void Scheduler::reject(std::uint64_t slot, std::exception_ptr error) {
  if (spec_.fallback == Fallback::host) {
    run_on_host(slot);
  } else {
    fail(slot, std::move(error));
  }
}

/// Runs the command in `slot` on the host: no engine, no device memory, its host duration.
inline void Scheduler::run_on_host(std::uint64_t slot) {
  Command& c = cmd(slot);
  c.on_host = true;
  c.state = Command::State::running;
  c.start = now_;
  events_.push_device(now_ + c.host_duration, slot, EventQueue::Kind::complete, ++c.generation);
  window_.fell_back();
  if (Timeline::Slice* s = trace_slice(slot, tracks_.size() - 1)) s->fallback = true;
}

inline void Scheduler::fail(std::uint64_t slot, std::exception_ptr error) {
  Command& c = cmd(slot);
  if (!c.foreseen) c.foreseen = error;  // met, if not foreseen: what later readers foresee
  c.failure = std::move(error);
  c.state = Command::State::running;
  c.start = now_;
  instant_.push_back(slot);
}

/// The host waits, nothing runs and nothing can arrive: the commands waiting for memory that
/// the export depends on cannot start as things are. Where L1 buffers kept for ready commands
/// are what they wait for (two steps, each needing the room the other's input holds), those
/// buffers may be spilled now, as the step that reads one brings it back when it starts. Else
/// they fail, and the failure reaches the export; with a host fallback the first of them runs
/// on the host instead (its end may free memory).
inline void Scheduler::resolve_deadlock(std::span<const std::uint64_t> slots) {
  const std::vector<std::uint64_t> blocked = blocked_for(slab_, slots);
  if (blocked.empty()) throw std::logic_error("ferry: the model cannot make progress");
  // The first (in submission order) that fits so starts, alone: once it runs, its own
  // inputs are a running command's, never spilled; then the others go as they always do.
  for (std::uint64_t slot : blocked) {
    const Command& c = cmd(slot);
    auto& free = free_[static_cast<std::size_t>(c.klass)];  // nothing runs: all are free
    if (free.empty() || !memory_.plan(slab_, slot, placement_, /*spill_ready_inputs=*/true)) {
      continue;
    }
    const int engine = free.top();
    free.pop();
    start(slot, engine);
    dispatch();
    return;
  }
  if (spec_.fallback == Fallback::host) {
    run_on_host(blocked.front());
  } else {
    for (std::uint64_t slot : blocked) fail(slot, out_of_memory(slot, held_memory(memory_, spec_)));
  }
  ready_.rebuild(slab_);  // the moved or failed commands' entries are stale now
  finish_instant();
  // What failed may have made others ready (a donation waiting for a failed reader of its
  // donor) or freed what they wait for: they start now, not at the host's next event.
  dispatched_ = false;
}

/// Nothing can happen until the host acts. A command waiting for memory whose result nothing
/// can read any more (it, and everything that reads it, lost its handle) would hold its
/// inputs' memory forever: it fails, unseen, and so does what reads it. True if any did.
inline bool Scheduler::drop_unobservable() {
  if (ready_.none_ready()) return false;  // the common case: no slab to search
  const std::vector<std::uint64_t> dead = unobservable(slab_);
  if (dead.empty()) return false;
  static const std::exception_ptr unseen =
      std::make_exception_ptr(Error("[model] dropped: nothing can read its result"));
  for (std::uint64_t slot : dead) fail(slot, unseen);
  window_.paths_too_long();
  ready_.rebuild(slab_);
  finish_instant();
  dispatched_ = false;  // memory came back: dispatch again
  return true;
}

inline std::exception_ptr Scheduler::out_of_memory(std::uint64_t slot,
                                                   const std::string& why) const {
  const Command& c = slab_[slot];
  const std::string_view name =
      slab_.labelled() ? std::string_view(slab_.label(slot).name) : "step";
  const std::string_view called = slab_.labelled() ? slab_.label(slot).called : "";
  // Named as a DeviceFault names its step: the op the program called first, when it differs.
  return std::make_exception_ptr(OutOfDeviceMemory(step_message(
      name, called, c.id, " on ", device_, " needs ", c.out_bytes, " bytes of ",
      c.l1 ? "L1 " : "DRAM ", why)));
}

}  // namespace ferry::detail
