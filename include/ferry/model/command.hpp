#pragma once
// What the simulator knows of each submitted step: CommandDesc is what the device model hands
// it, Command is the state it keeps while the step is in flight or its buffer is resident.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/core/cost.hpp"
#include "ferry/core/dtype.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/shape_table.hpp"
#include "ferry/runtime/device_state.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

inline constexpr std::uint64_t kNoCommand = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint64_t kNoSlice = std::numeric_limits<std::uint64_t>::max();

/// Command ids, inline for up to two (most steps have at most two inputs and two readers).
class IdList {
 public:
  void push_back(std::uint64_t id) {
    if (size_ < kInline) {
      inline_[size_] = id;
    } else {
      more_.push_back(id);
    }
    ++size_;
  }
  std::size_t size() const noexcept { return size_; }
  std::uint64_t operator[](std::size_t i) const noexcept {
    return i < kInline ? inline_[i] : more_[i - kInline];
  }
  void clear() noexcept {
    size_ = 0;
    more_.clear();
  }

 private:
  static constexpr std::size_t kInline = 2;
  std::uint64_t inline_[kInline] = {};
  std::vector<std::uint64_t> more_;
  std::size_t size_ = 0;
};

/// The engines a command can occupy.
enum class EngineClass : std::uint8_t { h2d, d2h, d2d, compute, none };
inline constexpr std::size_t kEngineClasses = 4;  // all but `none`

constexpr EngineClass engine_class_of(StepKind k) noexcept {
  switch (k) {
    case StepKind::copy_in: return EngineClass::h2d;
    case StepKind::copy_out: return EngineClass::d2h;
    case StepKind::copy_d2d: return EngineClass::d2d;
    case StepKind::compute: return EngineClass::compute;
    case StepKind::view: return EngineClass::none;
  }
  return EngineClass::none;
}

/// A submitted step, as the device model describes it to the simulator.
struct CommandDesc {
  std::uint64_t id = 0;  // submission number: increasing
  StepKind kind = StepKind::compute;
  KernelPlan plan;  // what it needs of units and memory (plan_step)
  Duration solo{-1};  // solo_duration(spec, plan), when the caller has it; negative: not given
  std::uint64_t out_bytes = 0;  // device memory the output takes (0 for views and exports)
  bool has_handle = true;       // a DeviceArray names it (not an export's copy to the host)
  std::span<const std::uint64_t> inputs;  // the slots Simulator::submit returned for them
  bool l1 = false;      // the output lives in L1
  int donor = -1;       // the input whose buffer the output takes over, or -1
  const Arrival* arrival = nullptr;  // a transfer from another device: when its data is there
  double bytes_moved = 0;  // what a copy moves, or a kernel reads and writes
  Duration host_duration{};  // how long it takes on the host (Fallback::host)
  // For the trace and for messages (not copied: read during the submit call only):
  std::string_view name;
  bool name_static = false;  // `name` has static storage (StepName::lent): known by its address
  std::string_view called;  // the op the program called, when `name` is a step of it ("var")
  const Shape* shape = nullptr;
  DType dtype = DType::float32;
  double flops = 0;
};

/// What the trace shows of a command, kept beside it (only when a trace is kept) for the slice
/// written when it starts, and for messages.
struct CommandLabel {
  std::string_view name;  // interned by the simulator (NameTable)
  std::string_view called;  // CommandDesc::called (static storage: a literal of the op's)
  const Shape* shape = &kNoShape;  // interned by the simulator (ShapeTable)
  DType dtype = DType::float32;
  double flops = 0;
};

/// The simulator's record of one command.
///
/// Laid out by when the simulator reads it, a cache line at a time: a mesh keeps tens of
/// thousands of commands in flight, more than the core's cache holds, so each phase of a
/// command's life (released, queued, started, done) finds it cold, and a phase that reads
/// fields spread over the record pays a miss for each line they are on. The first line holds
/// what every phase reads (state, counts, the queue's priority); the second, its times and
/// failures; then its lists; the work's description and its flow last: seven lines with
/// libstdc++ on x86-64. A field added moves those after it: place it by when it is read.
struct alignas(64) Command {
  enum class State : std::uint8_t {
    submitted,  // the host has not reached its release time in the model yet
    waiting,    // released, some input not done
    ready,      // may start when an engine and memory are free
    running,
    done,
  };

  // Every phase.
  std::uint64_t id = 0;
  Duration bottom{};    // critical-path priority: the longest path from here to a sink
  Duration duration{};  // alone on the device: the shortest it can take
  std::uint32_t pending = 0;  // inputs not done yet
  std::uint32_t fanout = 0;   // successors released so far (a tie-break of critical_path)
  std::int32_t pins = 0;      // its handle, unfinished readers, and views of it
  std::int32_t readers = 0;   // unfinished readers and live views: a donation waits for none
  std::uint32_t slot = 0;  // where it is kept (CommandSlab sets it once: reuse keeps it)
  std::uint32_t window = 0;  // the stats window it was submitted in
  StepKind kind = StepKind::compute;
  EngineClass klass = EngineClass::none;
  State state = State::submitted;
  bool allocated = false;  // holds out_bytes of device memory now
  bool l1 = false;         // its buffer belongs in L1
  bool spilled = false;    // an L1 buffer moved to DRAM to make room
  bool hot_counted = false;  // counted in its inputs' `hot` while ready or running
  bool on_host = false;    // rejected by the device and run on the host (Fallback::host)
  bool handle = false;     // a DeviceArray (or an export) still names it
  bool fits = true;        // it can ever fit in the device's memory (set at submission)
  bool stale_bottom = false;  // a successor released since `bottom` was computed (ReadySet)
  bool working = false;    // its latency is over: its work draws on its pool

  // Released and started: its times, and what fails it.
  Command* sole_input = nullptr;  // its input when it has exactly one (ReadySet follows it)
  std::exception_ptr failure;  // why it failed (set early for data that failed on another device)
  // The failure known at submission, before the schedule is decided, or the one it met
  // (Simulator::foresee).
  std::exception_ptr foreseen;
  std::exception_ptr fault;    // the fault the device injects when it would start, if any
  Duration release{};
  Duration start{-1};
  Duration end{-1};
  Duration
      earliest{};  // the earliest it could end: after its release and its inputs' (lower bound)

  IdList inputs;  // slots
  std::uint32_t hot = 0;      // readers ready or running: its buffer is not spilled meanwhile
  int engine = -1;  // a copy engine, or a compute lane (the track of a running kernel)
  std::uint32_t generation = 0;  // bumped when end_at moves: older completion events are stale

  IdList successors;  // slots
  std::uint64_t view_of = kNoCommand;  // a view shares the buffer of the command in this slot
  std::uint64_t waiter = kNoCommand;   // the donation waiting for this one's readers

  KernelPlan plan;

  Duration path{};    // the longest chain of durations ending here
  Duration taken{};  // when it took its engine (its spills and fills come first)
  std::int64_t units = 0;  // compute units it holds while running
  Duration unheld{};       // units x time it did not hold: units it got after it started
  std::uint64_t slice = kNoSlice;  // its slice in the trace, to close when it ends
  std::uint64_t out_bytes = 0;
  std::uint64_t bytes_moved = 0;
  std::uint64_t donor = kNoCommand;    // the input whose buffer it takes over

  // Its work as a flow (see BandwidthShare): the fraction still to do as of `since`, at `rate`
  // per ns, with `bandwidth` bytes per ns of its pool (asking for `demand`); ends at `end_at`.
  double remaining = 1;
  double rate = 0;
  double bandwidth = 0;
  double demand = 0;
  Duration since{};
  Duration end_at{};
  Duration host_duration{};  // its time on the host, if the device rejects it (Fallback::host)
  Duration last_use{};                 // when a command last wrote or read its buffer

  /// A view whose source must move first (spilled from a full L1) waits for memory as a
  /// zero-time kernel does, on a compute unit that carries the moves: views have no queue.
  void wait_as_zero_time_kernel() noexcept {
    klass = EngineClass::compute;
    plan.fixed = Duration::zero();
  }

  /// Makes a recycled slot a fresh command, keeping the storage of its lists and strings. The
  /// fields submit() always sets are left for it to set.
  void reuse() noexcept {
    state = State::submitted;
    allocated = false;
    on_host = false;
    handle = false;
    stale_bottom = false;
    pending = 0;
    fanout = 0;
    engine = -1;
    units = 0;
    working = false;
    unheld = Duration::zero();
    slice = kNoSlice;
    start = end = Duration{-1};
    bottom = path = last_use = Duration{};
    spilled = hot_counted = false;
    readers = 0;
    hot = 0;
    view_of = donor = waiter = kNoCommand;
    // Assigning null is a call into the library even when they hold none, as they almost
    // always do: cleared only when set.
    if (failure) failure = nullptr;
    if (fault) fault = nullptr;
    if (foreseen) foreseen = nullptr;
    inputs.clear();
    successors.clear();
    sole_input = nullptr;
  }

  bool done() const noexcept { return state == State::done; }
  /// The fraction of its work still to do at `now`, at its current rate.
  double left_at(Duration now) const noexcept {
    return std::max(0.0, remaining - static_cast<double>((now - since).count()) * rate);
  }
  bool started() const noexcept { return state >= State::running; }  // running or done
};

}  // namespace ferry::detail
