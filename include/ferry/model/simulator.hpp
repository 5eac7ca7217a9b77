#pragma once
// Simulator: the discrete-event model of a device. Commands arrive in submission order with the
// modeled host time of their submission; the Scheduler below decides when each starts and ends;
// exports wait for its verdicts, and stats and traces read what it decided.
//
// The one rule that makes the model a function of the program alone: what happens at modeled
// time t is decided only once the host's clock has passed t (or at an export, while the host
// waits, or when stats are asked for, or once Scheduler::kHostEventsAhead of the host's events
// wait at one instant: the bound on what waits). So every command submitted at one modeled
// instant is known before any of them is placed (below that bound), and nothing here reads a
// wall clock.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/model/command.hpp"
#include "ferry/model/horizon.hpp"
#include "ferry/model/scheduler.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/model/stats.hpp"
#include "ferry/model/timeline.hpp"

namespace ferry::detail {

class Simulator : private Scheduler {
 public:
  /// A model of `spec`; `device` names the device in the faults it injects.
  explicit Simulator(DeviceSpec spec, std::string device = "device")
      : Scheduler(std::move(spec), std::move(device)) {}

  const DeviceSpec& spec() const noexcept { return spec_; }
  Duration host_time() const noexcept { return host_; }
  /// Where the current window (stats(), the trace) starts on the modeled clock.
  Duration window_start() const noexcept { return window_.start(); }
  /// The size of the model's bookkeeping (tests): the host's events waiting for the model's
  /// clock (fewer than kHostEventsAhead after every call), and the commands not finished yet.
  std::size_t host_events_waiting() const noexcept { return events_.host_waiting(); }
  std::size_t commands_live() const noexcept { return unfinished_; }
  /// And the shapes the labels and slices may name (ShapeTable).
  std::size_t shapes_held() const noexcept { return shapes_.size(); }
  using Scheduler::kHostEventsAhead;

  /// A step was submitted: the host spends the launch overhead, then the command is released.
  /// Returns the slot that names the command in later calls (drop_handle, sync, as an input).
  std::uint32_t submit(const CommandDesc& d) {
    // host_ <= kHorizon and the overhead <= kLongestStep (validate): the sum fits.
    const Duration launched = host_ + spec_.launch_overhead;
    if (launched <= kHorizon) host_ = launched;  // else the step fails below: no time passes
    bool fresh = false;
    const std::uint32_t slot = slab_.take(fresh);
    ++unfinished_;
    Command& c = slab_[slot];
    if (!fresh) c.reuse();
    c.id = d.id;
    c.kind = d.kind;
    c.klass = engine_class_of(d.kind);
    c.plan = d.plan;
    c.duration = d.kind == StepKind::view     ? Duration::zero()
                 : d.solo >= Duration::zero() ? d.solo
                                              : solo_duration(spec_, d.plan);
    if (c.duration > kLongestStep) {
      // Sums of such times would overflow the device's figures: the step fails (its readers
      // with it), as custom refuses such a cost at the call.
      c.failure = std::make_exception_ptr(InvalidArgument(
          message(d.name, "step ", d.id, " on ", device_,
                  " would take longer than the model times one step (2^53 ns, about 104 days)")));
      c.duration = Duration::zero();
    }
    c.host_duration = d.host_duration;
    past_horizon(d, c, launched);
    c.out_bytes = d.out_bytes;
    c.release = host_;
    c.window = window_.index();
    c.pins = d.has_handle ? 1 : 0;
    c.handle = d.has_handle;
    c.l1 = d.l1;
    c.bytes_moved = static_cast<std::uint64_t>(d.bytes_moved);
    if (faults_.active()) {
      if (std::string why = faults_.fault(d.id, d.kind); !why.empty()) {
        c.fault = std::make_exception_ptr(
            DeviceFault(std::string(d.name), d.id, device_, std::move(why),
                        std::string(d.called)));
      }
    }
    if (slab_.labelled()) {
      CommandLabel& l = slab_.label(slot);
      l.name = d.name_static ? names_.intern_static(d.name) : names_.intern(d.name);
      l.called = d.called;
      l.shape = d.shape != nullptr ? shapes_.intern(*d.shape) : &kNoShape;
      if (shapes_.sweep_due()) sweep_shapes();
      l.dtype = d.dtype;
      l.flops = d.flops;
    }
    Duration longest_input{};
    Duration inputs_end = host_;
    for (std::uint64_t in_slot : d.inputs) {
      Command& in = cmd(in_slot);
      c.inputs.push_back(in_slot);
      ++in.pins;  // a reader keeps its input's buffer until it completes
      ++in.readers;
      if (!in.done()) {
        in.successors.push_back(slot);
        ++c.pending;
      }
      if (in.window == window_.index()) longest_input = std::max(longest_input, in.path);
      inputs_end = std::max(inputs_end, in.done() ? in.end : in.earliest);
      // A failed input fails it (make_ready), so an input's certain failure is its own; the
      // first one's, as there. (exception_ptr copies are library calls: made only when set.)
      if (in.foreseen && !c.foreseen) c.foreseen = in.foreseen;
    }
    if (c.inputs.size() == 1) {
      c.sole_input = &cmd(c.inputs[0]);
      if (c.kind == StepKind::view) {
        c.view_of = c.inputs[0];
        ++cmd(c.view_of).pins;  // a view shares its source's buffer for as long as it lives
      }
    }
    if (d.donor >= 0) wait_for_donor(slot, d.inputs[static_cast<std::size_t>(d.donor)]);
    // Data from another device: an input that completes when it arrives, but not in the past
    // the model has already decided (a collective settles its inputs, deciding their devices'
    // schedules up to them): that past's units and bandwidth are given away.
    if (d.arrival != nullptr) {
      ++c.pending;
      // Read only once it is done: it fails when released. (Set only when set: see above.)
      if (d.arrival->failure) c.failure = d.arrival->failure;
      events_.push_device(std::max({d.arrival->at, host_, now_}), slot, EventQueue::Kind::arrival);
    }
    foresee_failure(c);
    c.path = c.duration + longest_input;
    c.earliest = inputs_end + c.duration;  // both count in the lower bound once it has run
    events_.push_host(host_, slot, EventQueue::Kind::release);
    advance(host_);
    return slot;
  }

  /// The last user handle of the command in `slot` is gone, at the host's current time.
  void drop_handle(std::uint64_t slot) {
    events_.push_host(host_, slot, EventQueue::Kind::drop_handle);
    advance(host_);
  }

  /// An export: the host waits until every command of `slots` is done, then its clock moves to
  /// the last of their completions. `errors[i]` receives the failure of slots[i], if any.
  void sync(std::span<const std::uint64_t> slots, std::span<std::exception_ptr> errors,
            std::string_view what) {
    const Duration before = host_;
    run_until_done(slots);
    Duration end = before;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const Command& c = cmd(slots[i]);
      end = std::max(end, c.end);
      errors[i] = c.failure;
    }
    // Only the wait inside the window: a host behind the window's start (reset_stats after
    // work it has not waited for) did not stall in it before it began.
    const Duration from = std::max(before, window_.start());
    window_.host_sync(std::max(Duration::zero(), end - from));
    host_ = end;
    // The trace shows the same wait as the stats: none before the window (an instant one in
    // it stays, as an export's mark).
    if (Timeline::Slice* wait = from < end || from == before ? timeline_.add() : nullptr) {
      wait->id = slots.empty() ? 0 : cmd(slots.front()).id;
      wait->start = from;
      wait->end = end;
      wait->name = names_.intern(what);
    }
  }

  /// When the data of the command in `slot` can leave for another device (or fails), deciding
  /// the schedule as an export of it would, without moving the host's clock: what a transfer to
  /// another device waits for. The host sends it now: no earlier than the command's end, nor
  /// than the host's clock (data ready long before the call, as after the host waited for other
  /// work, leaves when the call is made, not before).
  Arrival settle(std::uint64_t slot) {
    const std::uint64_t slots[] = {slot};
    run_until_done(slots);
    const Command& c = cmd(slot);
    return {std::max(c.end, host_), c.failure};
  }

  /// Another device's transfer reads the buffer of the command in `slot` (done: settled)
  /// until `until`, when its data has arrived: the buffer counts as read, as by one of this
  /// device's commands, so it is neither freed nor written over by a donation before then.
  void read_until(std::uint64_t slot, Duration until) {
    Command& c = cmd(slot);
    ++c.pins;
    ++c.readers;
    reach_ = std::max(reach_, until);  // the clock goes there: what follows ends after it
    events_.push_device(std::max(until, now_), slot, EventQueue::Kind::read_done);
  }

  /// The failure of the command in `slot` as far as it is known without deciding the schedule:
  /// the one its submission made certain, or the one it met (Command::foreseen). What another
  /// device's receive of its data reads when settling it there would decide this device's
  /// schedule too early (all_reduce's reduced parts: mesh/all_reduce_parts.hpp).
  std::exception_ptr foresee(std::uint64_t slot) const { return cmd(slot).foreseen; }

  /// The figures of the current window. Decides everything submitted that can make progress.
  DeviceStats stats() {
    flush();
    return window_.report(tracks_, spec_, memory_);
  }

  /// Starts a new window: decides everything submitted, then zeroes the figures and the trace.
  void reset_stats() {
    flush();
    window_.reset(std::max(host_, now_));
    memory_.reset_peaks();
    timeline_.clear();
  }

  /// When any compute unit was busy in the window: sorted, disjoint intervals, kept whatever
  /// the trace keeps. Decides like stats().
  std::vector<std::pair<Duration, Duration>> compute_busy() {
    flush();
    return window_.computing();
  }

  /// The slices of the window (for tests and tools). Decides like stats(). Their shapes are
  /// the table's: valid until the next submission, which may sweep it.
  std::vector<Timeline::Slice> slices() {
    flush();
    return timeline_.slices();
  }

  std::string trace_json() {
    flush();
    return timeline_.json(spec_.name, tracks_);
  }

  /// The window's trace events as process `pid` named `process`, arrows numbered from
  /// flow_base + 1 (a mesh's trace). Returns the last arrow's number. Decides like stats().
  std::uint64_t append_trace_events(std::string& out, const std::string& process, int pid,
                                    std::uint64_t flow_base) {
    flush();
    return timeline_.append_events(out, process, tracks_, pid, flow_base);
  }

  /// A summary line and the Gantt chart of the window.
  std::string timeline_text() {
    const DeviceStats s = stats();
    std::string out = spec_.name + ": makespan " + std::to_string(s.makespan.count()) +
                      " ns, lower bound " + std::to_string(s.lower_bound.count()) +
                      " ns, efficiency " + std::to_string(s.efficiency()).substr(0, 4) + ", " +
                      std::to_string(s.steps) + " steps, " + std::to_string(s.host_syncs) +
                      " host syncs\n";
    return out + timeline_.text(tracks_, window_.start(), window_.last_end());
  }

 private:
  /// Fails the step `c` of `d`, launched at `launched`, where it could end past kHorizon: its
  /// release, its data's arrival or the latest time the model has reached (reach_), then its
  /// time on the device or, should it fall back, on the host. The bound is the steps' times
  /// laid end to end, which no schedule of them passes by more than the headroom past the
  /// horizon holds (model/horizon.hpp); a failed step takes no time and leaves reach_ as it is.
  void past_horizon(const CommandDesc& d, Command& c, Duration launched) {
    Duration from = std::max(reach_, launched);
    if (d.arrival != nullptr) from = std::max(from, d.arrival->at);
    const Duration end = held_sum(from, std::max(c.duration, c.host_duration));
    if (end <= kHorizon) {
      reach_ = end;
      return;
    }
    if (!c.failure) {
      c.failure = std::make_exception_ptr(InvalidArgument(step_message(
          d.name, d.called, d.id, " on ", device_, " would end at ", end.count(),
          " ns, past the end of modeled time (2^62 ns, about 146 years)")));
    }
    c.duration = c.host_duration = Duration::zero();
  }

  /// Lets go of the shapes no command's label and no kept slice names: every slot's label is
  /// marked, a free slot's too (its pointer may be stale, which only keeps a shape a while).
  void sweep_shapes() {
    shapes_.sweep([this](const auto& mark) {
      for (std::uint64_t slot = 0; slot < slab_.size(); ++slot) mark(slab_.label(slot).shape);
      timeline_.for_each_shape(mark);
    });
  }

  Duration reach_{};  // the latest end past_horizon admitted (or a transfer's read reaches)
};

}  // namespace ferry::detail
