#pragma once
// ferry::Updates: what a traced program changes besides what it returns, such as a module's
// parameters and an optimizer's moments and step count (MLX's `compile(inputs=state,
// outputs=state)`). A program given them reads their arrays at each call as inputs of its
// trace, writes the arrays a replay computes back in their place, and feeds the host numbers
// they need (a learning rate of the step count) as floating inputs of the trace, so that a
// training step is traced once and replayed with a new rate every call. The kinds of state
// live in the layers above (optim/updates.hpp makes them); this layer sees the interface only.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/program/trace.hpp"

namespace ferry {

namespace detail {

/// One object a program updates in place.
class ProgramState {
 public:
  virtual ~ProgramState() = default;

  /// What it is, for explain() and errors ("Adam", "module MLP").
  virtual std::string name() const = 0;

  /// Whether a call may be traced: false while the state is still to be made (an optimizer
  /// before its first step), when the call runs the function eagerly and makes it.
  virtual bool ready() const = 0;

  /// The arrays the function reads and replaces, in a fixed order: inputs of the trace before
  /// the call and outputs after it. Pointers to the object's own handles.
  virtual void arrays(std::vector<DeviceArray<float>*>& out) = 0;

  /// The host numbers this call needs, appended to `out` (an optimizer's learning rate at its
  /// step count); floating inputs of the trace. Throws what computing them throws (a schedule's
  /// invalid rate), before anything is submitted.
  virtual void scalars(std::vector<double>& out) const = 0;

  /// During the traced call: `traced` are scalars() as the function sees them (symbols of the
  /// trace). end_trace() clears them and returns why the trace cannot be cached ("" if it can),
  /// given every array the program's objects hold (`updated`).
  virtual void begin_trace(std::span<const SymFloat> traced) = 0;
  virtual std::string end_trace(std::span<DeviceArray<float>* const> updated) = 0;

  /// After a replay: what the function would have done on the host (count a step).
  virtual void replayed() = 0;
};

}  // namespace detail

/// The objects a program updates in place, given to ferry::jit beside the function; made by
/// ferry::updates(model, optimizer, ...) (optim/updates.hpp). Copies share the objects, which
/// must outlive every program given them.
class Updates {
 public:
  Updates() = default;

  /// Adds one object's state. For the makers of state kinds.
  void add(std::shared_ptr<detail::ProgramState> state) { states_.push_back(std::move(state)); }

  /// The objects, in the order given. Never throws.
  std::span<const std::shared_ptr<detail::ProgramState>> states() const noexcept { return states_; }

 private:
  std::vector<std::shared_ptr<detail::ProgramState>> states_;
};

namespace detail {

/// Where a traced call's objects find their numbers among the trace's scalar arguments: state
/// i's start at `first_scalar + first_number[i]`, and all of them span `numbers`. `arrays` are
/// the arrays they hold.
struct StateBinding {
  std::span<const std::shared_ptr<ProgramState>> states;
  std::span<DeviceArray<float>* const> arrays;
  std::span<const std::size_t> first_number;
  std::size_t first_scalar = 0;
  std::size_t numbers = 0;
};

/// Hands each object its traced numbers for the scope of the traced call (taken back if the
/// function throws).
class BoundStates {
 public:
  BoundStates(const StateBinding& binding, const Trace& trace) : binding_(binding) {
    const std::size_t n = binding.states.size();
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t end = i + 1 < n ? binding.first_number[i + 1] : binding.numbers;
      std::vector<SymFloat> traced;
      for (std::size_t j = binding.first_number[i]; j < end; ++j) {
        traced.push_back(trace.float_argument(binding.first_scalar + j));
      }
      binding.states[i]->begin_trace(traced);
    }
  }
  ~BoundStates() {
    if (!ended_) static_cast<void>(end());
  }
  BoundStates(const BoundStates&) = delete;
  BoundStates& operator=(const BoundStates&) = delete;

  /// Ends the traced call for every object; the first reason one gives not to cache the trace.
  std::string end() {
    ended_ = true;
    std::string reason;
    for (const auto& state : binding_.states) {
      std::string r = state->end_trace(binding_.arrays);
      if (reason.empty()) reason = std::move(r);
    }
    return reason;
  }

 private:
  const StateBinding& binding_;
  bool ended_ = false;
};

}  // namespace detail

}  // namespace ferry
