#pragma once
// Scheduler: the discrete-event core of a device's model. Events (a command completes, data
// arrives or has left, the host releases a command or drops a handle) advance a virtual clock;
// ready commands then start on free engines by policy as memory allows; what the device cannot
// run fails or runs on the host (model/recovery.hpp). Simulator, above it, is the model's API.

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/model/bandwidth.hpp"
#include "ferry/model/command.hpp"
#include "ferry/model/command_slab.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/events.hpp"
#include "ferry/model/free_engines.hpp"
#include "ferry/model/memory.hpp"
#include "ferry/model/names.hpp"
#include "ferry/model/ready_set.hpp"
#include "ferry/model/spec.hpp"
#include "ferry/model/timeline.hpp"
#include "ferry/model/units.hpp"
#include "ferry/model/window.hpp"

namespace ferry::detail {

class Scheduler {
 protected:
  /// A schedule for `spec`; `device` names the device in the faults it injects.
  Scheduler(DeviceSpec spec, std::string device)
      : spec_(std::move(spec)),
        device_(std::move(device)),
        faults_(spec_.faults),
        slab_(/*labelled=*/spec_.trace_steps > 0),
        ready_(spec_.policy),
        share_(spec_),
        units_(spec_.compute_units),
        memory_(static_cast<std::uint64_t>(spec_.dram_bytes),
                static_cast<std::uint64_t>(spec_.l1_bytes)),
        window_(3 + static_cast<std::size_t>(spec_.compute_units)),
        timeline_(static_cast<std::size_t>(spec_.trace_steps)) {
    const auto units = static_cast<std::size_t>(spec_.compute_units);
    tracks_ = {"host", "h2d", "d2h", "d2d"};
    for (int e = 0; e < 3; ++e) free_[static_cast<std::size_t>(e)].push(e);
    // One lane per kernel running at once (at most one per unit): the tracks of the trace.
    for (std::size_t u = 0; u < units; ++u) {
      free_[kCompute].push(static_cast<int>(3 + u));
      tracks_.push_back("compute " + std::to_string(u));
    }
    if (spec_.fallback == Fallback::host) tracks_.push_back("fallback");
  }

  static constexpr Duration kNever = EventQueue::kNever;
  static constexpr std::size_t kCompute = 3;  // index of the compute class in free_

  Command& cmd(std::uint64_t slot) noexcept { return slab_[slot]; }
  const Command& cmd(std::uint64_t slot) const noexcept { return slab_[slot]; }

  /// Decides until every command of `slots` is done. While the host waits nothing new can be
  /// submitted, so every time before the end of the wait can be decided.
  void run_until_done(std::span<const std::uint64_t> slots) {
    // The export pins its commands, so one done stays done: each is checked until it is, once
    // after (a wait over N commands is O(N + events), not O(N x events)).
    std::size_t done = 0;
    const auto all_done = [&] {
      while (done < slots.size() && cmd(slots[done]).done()) ++done;
      return done == slots.size();
    };
    while (!all_done()) {
      if (!dispatched_) dispatch();
      if (all_done()) break;
      const Duration t = next_event_time();
      if (t == kNever) {
        if (!drop_unobservable()) resolve_deadlock(slots);
      } else {
        process_time(t);
      }
    }
  }

  Duration next_event_time() const noexcept { return events_.next(now_); }

  /// Decides everything strictly before `limit`; everything that can progress once the host
  /// has released kHostEventsAhead events at one instant.
  void advance(Duration limit) {
    if (now_ < limit) {  // no event is due before now_ (a host that launches in no time)
      if (!dispatched_) dispatch();
      for (Duration t = next_event_time(); t < limit; t = next_event_time()) {
        process_time(t);
        dispatch();
      }
    }
    if (events_.host_waiting() >= kHostEventsAhead) decide_all(/*drop_unseen=*/false);
  }

  // Where launches take no host time (the host's spec) the host's clock stands still between
  // exports: every release and dropped handle waits at one instant until an export, and a loop
  // that never exports grows without bound. Past this many waiting events the model decides
  // ahead: a bound on its bookkeeping, high enough that the tests' programs (a hundred
  // training steps on specs::tiny() between exports) are decided exactly as before.
  static constexpr std::size_t kHostEventsAhead = std::size_t{1} << 16;

  /// Decides everything that can progress, whatever the host's clock (stats and traces), and
  /// fails what nothing can observe any more (see drop_unobservable).
  void flush() { decide_all(/*drop_unseen=*/true); }

  /// Decides everything that can progress. Ahead of the host (`drop_unseen` false) it fails no
  /// command: what the host releases at the same instant afterwards reaches the model when
  /// these end (a chain continues as it would have; independent work loses the engines left
  /// idle meanwhile).
  void decide_all(bool drop_unseen) {
    for (;;) {
      if (!dispatched_) dispatch();
      const Duration t = next_event_time();
      if (t != kNever) {
        process_time(t);
      } else if (!drop_unseen || !drop_unobservable()) {
        return;
      }
    }
  }

  /// Applies every event at time `t`: completions first, then the host's releases and drops.
  void process_time(Duration t) {
    EventQueue::Event e;
    // An idle device frees a buffer another device finished reading without moving its clock:
    // nothing here waits for it, and the clock carried to the other device's arrival (a flush
    // decides every event) would hold back the next work submitted here.
    if (unfinished_ == 0 && events_.next_device_is(t, EventQueue::Kind::read_done)) {
      events_.pop_device(t, e);
      drop_reader(e.slot);
      unpin(e.slot);
      return;
    }
    window_.time_passes(now_, t);
    now_ = t;
    dispatched_ = false;
    while (events_.pop_device(t, e)) {
      switch (e.kind) {
        case EventQueue::Kind::arrival: input_done(e.slot); break;
        case EventQueue::Kind::read_done: drop_reader(e.slot), unpin(e.slot); break;
        case EventQueue::Kind::work_begins: begin_work(static_cast<std::uint32_t>(e.slot)); break;
        default:
          // A flow whose share changed was re-timed: only its latest completion counts.
          if (e.generation == cmd(e.slot).generation) complete(e.slot);
          break;
      }
    }
    while (events_.pop_host(t, e)) {
      if (e.kind == EventQueue::Kind::release) {
        release(e.slot);
      } else {
        cmd(e.slot).handle = false;
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
    if (c.fault) {
      window_.fault();
      reject(slot, c.fault);
      return;
    }
    if (!c.fits) {  // the error foreseen for it, or (a fallback foresees none) a new one
      reject(slot, c.foreseen ? c.foreseen : out_of_memory(slot, memory_.never_fits(slab_, c)));
      return;
    }
    // From now until it completes, its inputs are about to be read: never spilled.
    c.hot_counted = true;
    for (std::size_t i = 0; i < c.inputs.size(); ++i)
      ++cmd(DeviceMemory::source(slab_, c.inputs[i])).hot;
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
      if (c.klass == EngineClass::none) c.wait_as_zero_time_kernel();
    }
    c.state = Command::State::ready;
    ready_.became_ready(slab_, c);
  }

  /// Completes `c` as it is submitted, its inputs' failures already in `c.foreseen` (submit()
  /// takes the first one's): whether it can ever fit (`fits`, make_ready() reads it), and the
  /// failure make_ready() will certainly meet, in its order (data that failed on another
  /// device, an input's failure, the fault it will be injected, a size it can never fit),
  /// unless the host runs it instead. A failure only the schedule decides (memory a deadlock
  /// never frees) is not foreseen.
  void foresee_failure(Command& c);

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

  // What happens to a command the device cannot run (defined in model/recovery.hpp).
  void reject(std::uint64_t slot, std::exception_ptr error);
  void run_on_host(std::uint64_t slot);
  void fail(std::uint64_t slot, std::exception_ptr error);

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
    if (share_.pending()) [[unlikely]] {
      retimed_.clear();  // pools kernels left at this instant, shared anew (BandwidthShare)
      share_.settle(slab_, now_, retimed_), schedule_completions();
    }
  }

  void dispatch_classes() {
    grow_running();
    for (std::size_t k = 0; k < kEngineClasses; ++k) {
      ReadyQueue& q = ready_.of(k);
      auto& free = free_[k];
      if (q.empty() || free.empty()) continue;
      if (k == kCompute && units_.free() == 0) continue;
      // The order matters only between two or more (by engine, or by memory when one does not
      // fit): only then must the priorities be exact. A chain never has two ready at once.
      if (q.size() > 1) ready_.refresh(slab_);
      blocked_.clear();
      while (!free.empty() && !q.empty() && (k != kCompute || units_.free() > 0)) {
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
      for (std::uint32_t slot : blocked_) ready_.push(cmd(slot));
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

  /// Starts the command in `slot` on `engine` (a copy engine, or a compute lane with as many
  /// free units as its tiles can use): its spills and fills, its latency, then its work.
  void start(std::uint64_t slot, int engine) {
    const Duration moves = place(slot);
    Command& c = cmd(slot);
    if (moves > Duration::zero()) trace_moves(c, engine, moves);
    c.state = Command::State::running;
    c.engine = engine;
    c.taken = now_;
    c.start = now_ + moves;
    // Work joining its pool now samples the counters then, units included (the trace keeps one).
    const bool begins_now = !c.plan.is_fixed() && c.start + c.plan.latency == now_;
    if (c.klass == EngineClass::compute) {
      units_.take(slab_, static_cast<std::uint32_t>(slot));
      if (!begins_now || c.units == 0) usage_changed();
    }
    window_.started(c.klass, c.bytes_moved);
    window_.least_work(c.klass, c.plan, c.duration);
    if (Timeline::Slice* s = trace_slice(slot, static_cast<std::size_t>(engine) + 1)) {
      c.slice = timeline_.last_added();
      s->end = c.start + c.duration;  // for now: its end is known when it completes
    }
    if (c.plan.is_fixed()) {
      events_.push_device(c.start + c.plan.fixed, slot, EventQueue::Kind::complete, ++c.generation);
      return;
    }
    if (begins_now) {
      begin_work(static_cast<std::uint32_t>(slot));
    } else {
      events_.push_device(c.start + c.plan.latency, slot, EventQueue::Kind::work_begins);
    }
  }

  /// Free units go to running kernels that started with fewer (see ComputeUnits).
  void grow_running() {
    retimed_.clear();
    if (units_.grow(slab_, now_, share_, retimed_)) {
      schedule_completions();
      usage_changed();
    }
  }

  /// The command in `slot` starts its work: it draws on its memory pool from now on.
  void begin_work(std::uint32_t slot) {
    cmd(slot).working = true;
    retimed_.clear();
    share_.join(slab_, slot, now_, retimed_);
    schedule_completions();
  }

  /// Pushes the completion of every flow BandwidthShare re-timed.
  void schedule_completions() {
    for (std::uint32_t r : retimed_) {
      Command& f = cmd(r);
      events_.push_device(f.end_at, r, EventQueue::Kind::complete, ++f.generation);
    }
    if (!retimed_.empty()) usage_changed();
  }

  /// The trace's counters: units in use, DRAM bandwidth in use.
  void usage_changed() {
    timeline_.usage(now_, units_.in_use(), share_.in_use(0) * 1e9);
  }

  /// The trace's slice for the command in `slot`, which just started, on `track`; null when no
  /// trace is kept.
  Timeline::Slice* trace_slice(std::uint64_t slot, std::size_t track) {
    Timeline::Slice* s = timeline_.add_as_left();  // describe sets every field
    if (s != nullptr) timeline_.describe(*s, slab_, slot, slab_.label(slot), track);
    return s;
  }

  /// A slice for the spills and fills before command `c` on `engine`.
  void trace_moves(const Command& c, int engine, Duration moves) {
    Timeline::Slice* s = timeline_.add();
    if (s == nullptr) return;
    s->id = c.id;
    s->track = static_cast<std::size_t>(engine) + 1;
    s->start = now_;
    s->end = now_ + moves;
    s->name = placement_.spills.empty()  ? "fill"
              : placement_.fills.empty() ? "spill"
                                         : "spill+fill";
    s->bytes = static_cast<double>(placement_.spill_bytes + placement_.fill_bytes);
    for (std::uint32_t moved : placement_.spills) s->producers.push_back(cmd(moved).id);
    for (std::uint32_t moved : placement_.fills) s->producers.push_back(cmd(moved).id);
  }

  void complete(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (c.engine >= 0) {
      free_[static_cast<std::size_t>(c.klass)].push(c.engine);
      window_.left_engine(c.klass, c.engine, now_ - c.taken, c.units, c.unheld);
      if (c.klass == EngineClass::compute) window_.compute_busy(c.taken, now_);
      c.engine = -1;
      // The others' shares are settled once the instant's starts are known (dispatch).
      if (!c.plan.is_fixed()) share_.leave(slab_, static_cast<std::uint32_t>(slot));
      if (c.units > 0) {
        units_.give_back(slab_, static_cast<std::uint32_t>(slot));
        usage_changed();
      }
      if (c.slice != kNoSlice) timeline_.end(c.slice, now_);
    }
    c.state = Command::State::done;
    --unfinished_;
    c.end = now_;
    // The figures count only work that ran: a failed command (and all that needed it) is in no
    // path and no makespan. A command of an earlier window counted in none.
    if (!c.failure) window_.completed(c.window, now_);
    if (!c.failure && c.window == window_.index()) {
      window_.path(c.path);
      window_.earliest_end(c.earliest);
    }
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
    if (c.pins == 0) slab_.give_back(slot);  // nothing can name it any more
  }

  /// One pin of `slot` fewer. A command done and unpinned is gone: its buffer is freed and
  /// its slot taken by the next command, whatever was submitted before it (a slot waiting
  /// for every earlier command to finish left a new device's slab growing, each slot made
  /// anew, while a slow collective input held the front).
  void unpin(std::uint64_t slot) {
    Command& c = cmd(slot);
    if (--c.pins > 0 || !c.done()) return;
    release_buffer(c);
    slab_.give_back(slot);
  }

  void release_buffer(Command& c) {
    memory_.release(slab_, c.slot, now_, timeline_);
    if (c.view_of != kNoCommand) {
      const std::uint64_t source = std::exchange(c.view_of, kNoCommand);
      drop_reader(source);
      unpin(source);
    }
  }

  // What the model does when nothing can happen until the host acts (model/recovery.hpp).
  void resolve_deadlock(std::span<const std::uint64_t> slots);
  bool drop_unobservable();
  std::exception_ptr out_of_memory(std::uint64_t slot, const std::string& why) const;

  DeviceSpec spec_;
  std::string device_;
  FaultInjector faults_;
  CommandSlab slab_;                       // every command in flight or still pinned
  NameTable names_;                        // what the labels and the trace's slices name
  ShapeTable shapes_;                      // and the shapes they hold
  EventQueue events_;
  ReadySet ready_;
  BandwidthShare share_;
  ComputeUnits units_;
  std::vector<std::uint32_t> retimed_;     // scratch: flows whose end moved
  std::array<FreeEngines, kEngineClasses> free_;  // each class's idle engines
  std::vector<std::uint64_t> instant_;
  std::vector<std::uint32_t> blocked_;
  bool dispatched_ = true;  // whether the dispatch at now_ happened
  std::size_t unfinished_ = 0;  // commands submitted and not done
  Duration host_{};
  Duration now_{};
  DeviceMemory memory_;
  Placement placement_;  // scratch: what starting the command at hand takes
  StatsWindow window_;
  Timeline timeline_;
  std::vector<std::string> tracks_;
};

}  // namespace ferry::detail

#include "ferry/model/recovery.hpp"  // IWYU pragma: keep
