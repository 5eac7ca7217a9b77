#pragma once
// Simulator: the discrete-event model of a device. Commands arrive in submission order with the
// modeled host time of their submission; events (a command completes, the host submits or drops
// a handle) advance a virtual clock, and at each event time the scheduler starts ready commands
// on free engines by policy, as device memory allows.
//
// The one rule that makes the model a function of the program alone: what happens at modeled
// time t is decided only once the host's clock has passed t (or at an export, while the host
// waits, or when stats are asked for). So every command submitted at one modeled instant is
// known before any of them is placed, and nothing here reads a wall clock.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <queue>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/core/error.hpp"
#include "ferry/model/command.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/memory.hpp"
#include "ferry/model/ready_set.hpp"
#include "ferry/model/ring.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/model/stats.hpp"
#include "ferry/model/timeline.hpp"
#include "ferry/model/window.hpp"

namespace ferry::detail {

class Simulator {
 public:
  explicit Simulator(DeviceSpec spec)
      : spec_(std::move(spec)),
        ready_(spec_.policy),
        memory_(static_cast<std::uint64_t>(spec_.dram_bytes), static_cast<std::uint64_t>(spec_.l1_bytes)),
        window_(3 + static_cast<std::size_t>(spec_.compute_units)),
        timeline_(static_cast<std::size_t>(spec_.trace_steps)) {
    const auto units = static_cast<std::size_t>(spec_.compute_units);
    tracks_ = {"host", "h2d", "d2h", "d2d"};
    for (int e = 0; e < 3; ++e) free_[static_cast<std::size_t>(e)].push(e);
    for (std::size_t u = 0; u < units; ++u) {
      free_[kCompute].push(static_cast<int>(3 + u));
      tracks_.push_back("compute " + std::to_string(u));
    }
  }

  const DeviceSpec& spec() const noexcept { return spec_; }
  Duration host_time() const noexcept { return host_; }

  /// A step was submitted: the host spends the launch overhead, then the command is released.
  /// Returns the slot that names the command in later calls (drop_handle, sync, as an input).
  std::uint32_t submit(const CommandDesc& d) {
    host_ += spec_.launch_overhead;
    const std::uint32_t slot = new_slot();  // may move the slab: no references held yet
    live_.emplace_back() = slot;
    Command& c = slab_[slot];
    c.reuse();
    c.id = d.id;
    c.kind = d.kind;
    c.klass = engine_class_of(d.kind);
    c.duration = d.duration;
    c.out_bytes = d.out_bytes;
    c.release = host_;
    c.window = window_.index();
    c.pins = d.has_handle ? 1 : 0;
    c.l1 = d.l1;
    c.bytes_moved = static_cast<std::uint64_t>(d.bytes_moved);
    if (keep_labels()) {
      if (labels_.size() < slab_.size()) labels_.resize(slab_.size());
      CommandLabel& l = labels_[slot];
      l.name = d.name;
      l.shape = d.shape != nullptr ? *d.shape : Shape{};
      l.dtype = d.dtype;
      l.flops = d.flops;
    }
    Duration longest_input{};
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
    }
    if (c.kind == StepKind::view && c.inputs.size() == 1) {
      c.view_of = c.inputs[0];
      ++cmd(c.view_of).pins;  // a view shares its source's buffer for as long as it lives
    }
    if (d.donor >= 0) wait_for_donor(slot, d.inputs[static_cast<std::size_t>(d.donor)]);
    if (d.arrival != nullptr) {  // data from another device: an input that completes then
      ++c.pending;
      c.failure = d.arrival->failure;  // read only once it is done: it fails when released
      completions_.push({std::max(d.arrival->at, host_), seq_++, slot, true});
    }
    c.path = c.duration + longest_input;
    window_.path(c.path);
    host_events_.emplace_back() = {host_, slot, true};
    advance(host_);
    return slot;
  }

  /// The last user handle of the command in `slot` is gone, at the host's current time.
  void drop_handle(std::uint64_t slot) {
    host_events_.emplace_back() = {host_, slot, false};
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
    window_.host_sync(end - before);
    host_ = end;
    if (Timeline::Slice* wait = timeline_.add()) {
      wait->id = slots.empty() ? 0 : cmd(slots.front()).id;
      wait->start = before;
      wait->end = end;
      wait->name = what;
    }
    retire();
  }

  /// When the command in `slot` has its data (or fails), deciding the schedule as an export of
  /// it would, without moving the host's clock: what a transfer to another device waits for.
  Arrival settle(std::uint64_t slot) {
    const std::uint64_t slots[] = {slot};
    run_until_done(slots);
    retire();
    const Command& c = cmd(slot);
    return {c.end, c.failure};
  }

  /// The figures of the current window. Decides everything submitted that can make progress.
  DeviceStats stats() {
    flush();
    return window_.report(tracks_, spec_.compute_units, memory_);
  }

  /// Starts a new window: decides everything submitted, then zeroes the figures and the trace.
  void reset_stats() {
    flush();
    window_.reset(std::max(host_, now_));
    memory_.reset_peaks();
    timeline_.clear();
  }

  /// The slices of the window (for tests and tools). Decides like stats().
  std::vector<Timeline::Slice> slices() {
    flush();
    return timeline_.slices();
  }

  std::string trace_json() {
    flush();
    return timeline_.json(spec_.name, tracks_);
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
  static constexpr Duration kNever = Duration::max();
  static constexpr std::size_t kCompute = 3;  // index of the compute class in free_

  struct HostEvent {
    Duration time;
    std::uint64_t slot;
    bool release;  // else: the last handle of the command in `slot` was dropped
  };
  struct Completion {
    Duration time;
    std::uint64_t seq;  // ties broken by start order: deterministic
    std::uint64_t slot;
    bool arrival = false;  // not a completion: the data of a transfer reached its device
    bool operator>(const Completion& o) const noexcept {
      return time != o.time ? time > o.time : seq > o.seq;
    }
  };

  Command& cmd(std::uint64_t slot) noexcept { return slab_[slot]; }

  /// A free slot for a new command: a recycled one, or a new one at the end of the slab.
  std::uint32_t new_slot() {
    if (!free_slots_.empty()) {
      const std::uint32_t slot = free_slots_.back();
      free_slots_.pop_back();
      return slot;
    }
    slab_.emplace_back();
    return static_cast<std::uint32_t>(slab_.size() - 1);
  }

  /// The command in `slot` is done, retired and unpinned: nothing names it any more. The next
  /// command to take the slot overwrites it (Command::reuse).
  void free_slot(std::uint64_t slot) {
    slab_[slot].failure = nullptr;  // let go of the exception now
    free_slots_.push_back(static_cast<std::uint32_t>(slot));
  }

  bool all_done(std::span<const std::uint64_t> slots) {
    return std::all_of(slots.begin(), slots.end(), [&](std::uint64_t s) { return cmd(s).done(); });
  }

  /// Decides until every command of `slots` is done. While the host waits nothing new can be
  /// submitted, so every time before the end of the wait can be decided.
  void run_until_done(std::span<const std::uint64_t> slots) {
    while (!all_done(slots)) {
      if (!dispatched_) dispatch();
      if (all_done(slots)) break;
      const Duration t = next_event_time();
      if (t == kNever) {
        resolve_deadlock(slots);
      } else {
        process_time(t);
      }
    }
  }

  Duration next_event_time() const noexcept {
    Duration t = completions_.empty() ? kNever : completions_.top().time;
    if (!host_events_.empty()) t = std::min(t, std::max(host_events_.front().time, now_));
    return t;
  }

  /// Decides everything strictly before `limit`.
  void advance(Duration limit) {
    if (!dispatched_ && now_ < limit) dispatch();
    for (Duration t = next_event_time(); t < limit; t = next_event_time()) {
      process_time(t);
      dispatch();
    }
    retire();
  }

  /// Decides everything that can progress, whatever the host's clock (stats and traces).
  void flush() {
    for (;;) {
      if (!dispatched_) dispatch();
      const Duration t = next_event_time();
      if (t == kNever) break;
      process_time(t);
    }
    retire();
  }

  /// Applies every event at time `t`: completions first, then the host's releases and drops.
  void process_time(Duration t) {
    window_.time_passes(now_, t);
    now_ = t;
    dispatched_ = false;
    while (!completions_.empty() && completions_.top().time == t) {
      const Completion e = completions_.top();
      completions_.pop();
      if (e.arrival) {
        input_done(e.slot);
      } else {
        complete(e.slot);
      }
    }
    while (!host_events_.empty() && host_events_.front().time <= t) {
      const HostEvent e = host_events_.front();
      host_events_.pop_front();
      if (e.release) {
        release(e.slot);
      } else {
        unpin(e.slot);
      }
    }
    finish_instant();
  }

  void release(std::uint64_t slot) {
    cmd(slot).state = Command::State::waiting;
    ready_.released(slab_, slot);
    if (cmd(slot).pending == 0) make_ready(slot);
  }

  void make_ready(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (c.failure) {  // its data failed on another device
      fail(slot, c.failure);
      return;
    }
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      if (const Command& in = cmd(c.inputs[i]); in.failure) {
        fail(slot, in.failure);  // an input failed: so does everything that needs it
        return;
      }
    }
    if (const std::string why = memory_.never_fits(slab_, c); !why.empty()) {
      fail(slot, out_of_memory(slot, why));
      return;
    }
    // From now until it completes, its inputs are about to be read: never spilled.
    c.hot_counted = true;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) ++cmd(DeviceMemory::source(slab_, c.inputs[i])).hot;
    if (c.klass == EngineClass::none || c.duration == Duration::zero()) {
      // Views and zero-time steps take no engine: they finish where they begin, if they need
      // no memory moved.
      if (memory_.plan(slab_, slot, placement_) && placement_.moves_nothing()) {
        place(slot);
        c.state = Command::State::running;
        c.start = now_;
        instant_.push_back(slot);
        return;
      }
    }
    c.state = Command::State::ready;
    ready_.push(slab_, slot);
  }

  /// An input of `slot` outside its own list is done (another device's data arrived, or the
  /// readers its donation waited for finished).
  void input_done(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (--c.pending == 0 && c.state == Command::State::waiting) make_ready(slot);
  }

  /// The command in `slot` overwrites its input `donor`: it waits until every other reader of
  /// the donor, and every view of it, is done.
  void wait_for_donor(std::uint64_t slot, std::uint64_t donor) {
    Command& c = cmd(slot);
    Command& d = cmd(donor);
    c.donor = donor;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) d.readers -= c.inputs[i] == donor ? 1 : 0;
    if (d.readers > 0) {
      d.waiter = slot;
      ++c.pending;
    }
  }

  /// One reader (or view) of `slot` fewer; the last one releases a waiting donation.
  void drop_reader(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (--c.readers == 0 && c.waiter != kNoCommand) input_done(std::exchange(c.waiter, kNoCommand));
  }

  void fail(std::uint64_t slot, std::exception_ptr error) {
    Command& c = cmd(slot);
    c.failure = std::move(error);
    c.state = Command::State::running;
    c.start = now_;
    instant_.push_back(slot);
  }

  /// Completes the commands that finish where they begin; false if there were none.
  bool finish_instant() {
    if (instant_.empty()) return false;
    while (!instant_.empty()) {
      const std::uint64_t slot = instant_.back();
      instant_.pop_back();
      complete(slot);
    }
    return true;
  }

  /// Starts ready commands on free engines, best first, as memory allows; a command that does
  /// not fit waits and lets smaller ones pass. Commands that finish at once (views, zero-time
  /// steps, failures) can make others ready at this same instant: go round until none does.
  void dispatch() {
    dispatched_ = true;
    do {
      dispatch_classes();
    } while (finish_instant());
  }

  void dispatch_classes() {
    for (std::size_t k = 0; k < kEngineClasses; ++k) {
      ReadyQueue& q = ready_.of(k);
      auto& free = free_[k];
      if (q.empty() || free.empty()) continue;
      if (ready_.stale() && q.size() > free.size()) ready_.recompute(slab_, live_);
      blocked_.clear();
      while (!free.empty() && !q.empty()) {
        const ReadyQueue::Entry e = q.top();
        q.pop();
        Command& c = cmd(e.slot);
        const bool stale = c.id != e.id || c.state != Command::State::ready ||
                           (spec_.policy == SchedulePolicy::critical_path &&
                            (e.bottom != c.bottom || e.fanout != c.fanout));
        if (stale) continue;
        if (!memory_.plan(slab_, e.slot, placement_)) {
          blocked_.push_back(e.slot);
          continue;
        }
        const int engine = free.top();
        free.pop();
        start(e.slot, engine);
      }
      for (std::uint32_t slot : blocked_) ready_.push(slab_, slot);
    }
  }

  /// Carries out placement_ (just planned for `slot`) and counts what it did; returns the
  /// time its spills and fills take before the command itself can run.
  Duration place(std::uint64_t slot) {
    memory_.apply(slab_, slot, placement_, now_, timeline_);
    window_.placed(placement_.spills.size(), placement_.donates);
    if (placement_.moves_nothing()) return Duration::zero();
    return to_duration(static_cast<double>(placement_.spill_bytes + placement_.fill_bytes) /
                       spec_.dram_bytes_per_second);
  }

  void start(std::uint64_t slot, int engine) {
    const Duration moves = place(slot);
    Command& c = cmd(slot);
    if (moves > Duration::zero()) trace_moves(c, engine, moves);
    c.state = Command::State::running;
    c.engine = engine;
    c.start = now_ + moves;
    completions_.push({c.start + c.duration, seq_++, slot});
    window_.started(c.klass, engine, moves + c.duration, c.bytes_moved);
    Timeline::Slice* s = timeline_.add();
    if (s == nullptr) return;
    const CommandLabel& l = labels_[slot];
    s->id = c.id;
    s->track = static_cast<std::size_t>(engine) + 1;
    s->start = c.start;
    s->end = c.start + c.duration;
    s->name = l.name;
    s->shape = l.shape;
    s->dtype = l.dtype;
    s->bytes = static_cast<double>(c.bytes_moved);
    s->flops = l.flops;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const Command& in = cmd(c.inputs[i]);  // an arrow from the command that made the data
      s->producers.push_back(in.view_of != kNoCommand ? cmd(in.view_of).id : in.id);
    }
  }

  /// A slice for the spills and fills before command `c` on `engine`.
  void trace_moves(const Command& c, int engine, Duration moves) {
    Timeline::Slice* s = timeline_.add();
    if (s == nullptr) return;
    s->id = c.id;
    s->track = static_cast<std::size_t>(engine) + 1;
    s->start = now_;
    s->end = now_ + moves;
    s->name = placement_.spills.empty() ? "fill" : placement_.fills.empty() ? "spill" : "spill+fill";
    s->bytes = static_cast<double>(placement_.spill_bytes + placement_.fill_bytes);
    for (std::uint32_t moved : placement_.spills) s->producers.push_back(cmd(moved).id);
    for (std::uint32_t moved : placement_.fills) s->producers.push_back(cmd(moved).id);
  }

  void complete(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (c.engine >= 0) {
      free_[static_cast<std::size_t>(c.klass)].push(c.engine);
      window_.left_engine(c.klass);
      c.engine = -1;
    }
    c.state = Command::State::done;
    c.end = now_;
    window_.completed(c.window, now_);
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const std::uint64_t in = c.inputs[i];
      if (c.hot_counted) --cmd(DeviceMemory::source(slab_, in)).hot;
      // A view reads its source for as long as it lives (release_buffer); a donation gave up
      // its reads of the donor when it was submitted.
      if (c.kind != StepKind::view && in != c.donor) drop_reader(in);
    }
    c.hot_counted = false;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) unpin(c.inputs[i]);
    if (c.pins == 0) release_buffer(c);
    for (std::size_t i = 0; i < c.successors.size(); ++i) {
      const std::uint64_t s = c.successors[i];
      if (--cmd(s).pending == 0 && cmd(s).state == Command::State::waiting) make_ready(s);
    }
    c.successors.clear();
  }

  void unpin(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (--c.pins > 0 || !c.done()) return;
    release_buffer(c);
    if (c.retired) free_slot(slot);  // out of the live list already: nothing names it now
  }

  void release_buffer(Command& c) {
    memory_.release(slab_, static_cast<std::uint64_t>(&c - slab_.data()), now_, timeline_);
    if (c.view_of != kNoCommand) {
      const std::uint64_t source = std::exchange(c.view_of, kNoCommand);
      drop_reader(source);
      unpin(source);
    }
  }

  /// Drops finished commands from the front of the live list. Those still pinned (a handle may
  /// read them again) keep their slot until unpinned; the others free it now.
  void retire() {
    while (!live_.empty() && cmd(live_.front()).done()) {
      const std::uint32_t slot = live_.front();
      live_.pop_front();
      Command& c = cmd(slot);
      c.retired = true;
      c.successors.clear();
      if (c.pins == 0) free_slot(slot);
    }
  }

  /// The host waits, nothing runs and nothing can arrive: the commands waiting for memory that
  /// the export depends on can never start. They fail, and the failure reaches the export.
  void resolve_deadlock(std::span<const std::uint64_t> slots) {
    std::vector<std::uint64_t> stack(slots.begin(), slots.end());
    std::vector<std::uint64_t> blocked;
    std::vector<std::uint64_t> seen;
    while (!stack.empty()) {
      const std::uint64_t slot = stack.back();
      stack.pop_back();
      if (std::find(seen.begin(), seen.end(), slot) != seen.end()) continue;
      seen.push_back(slot);
      const Command& c = cmd(slot);
      if (c.done()) continue;
      if (c.state == Command::State::ready) blocked.push_back(slot);
      for (std::size_t i = 0; i < c.inputs.size(); ++i) stack.push_back(c.inputs[i]);
    }
    if (blocked.empty()) throw std::logic_error("ferry: the model cannot make progress");
    std::sort(blocked.begin(), blocked.end(),
              [&](std::uint64_t a, std::uint64_t b) { return cmd(a).id < cmd(b).id; });
    for (std::uint64_t slot : blocked) {
      fail(slot, out_of_memory(slot, "while " + std::to_string(memory_.dram_used()) + " of " +
                                              std::to_string(spec_.dram_bytes) + " bytes of DRAM and " +
                                              std::to_string(memory_.l1_used()) + " of " +
                                              std::to_string(spec_.l1_bytes) +
                                              " bytes of L1 are held by arrays still in use, and "
                                              "nothing running can free them"));
    }
    ready_.rebuild(slab_, live_);  // the failed commands' entries are stale now
    finish_instant();
  }

  std::exception_ptr out_of_memory(std::uint64_t slot, const std::string& why) const {
    const Command& c = slab_[slot];
    const std::string_view name = keep_labels() ? std::string_view(labels_[slot].name) : "step";
    return std::make_exception_ptr(OutOfDeviceMemory(message(
        name, "step ", c.id, " needs ", c.out_bytes, " bytes of ", c.l1 ? "L1 " : "DRAM ", why)));
  }

  bool keep_labels() const noexcept { return spec_.trace_steps > 0; }

  DeviceSpec spec_;
  std::vector<Command> slab_;               // every command in flight or still pinned
  std::vector<CommandLabel> labels_;       // beside slab_, when a trace is kept
  std::vector<std::uint32_t> free_slots_;  // slots of the slab no command uses
  Ring<std::uint32_t> live_;               // slots of unretired commands, in submission order
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions_;
  Ring<HostEvent> host_events_;  // in host time order, like the host's calls
  std::uint64_t seq_ = 0;
  ReadySet ready_;
  std::array<std::priority_queue<int, std::vector<int>, std::greater<>>, kEngineClasses> free_;
  std::vector<std::uint64_t> instant_;
  std::vector<std::uint32_t> blocked_;
  bool dispatched_ = true;  // whether the dispatch at now_ happened
  Duration host_{};
  Duration now_{};
  DeviceMemory memory_;
  Placement placement_;  // scratch: what starting the command at hand takes

  StatsWindow window_;

  Timeline timeline_;
  std::vector<std::string> tracks_;
};

}  // namespace ferry::detail
