#pragma once
// The seam through which ops take part in reverse-mode differentiation. While ferry::grad (or
// value_and_grad, vjp) runs a function on this thread, a Tape tracks the arrays that depend on
// the arguments being differentiated; each op that reads one of them reports its inputs, its
// output and how to carry a cotangent back from the output to the inputs. Tapes nest (grad of
// grad): each keeps its own arrays and passes every report on to the one it interrupted. There
// is no global tape: a tape lives on the stack of one call, on one thread.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <type_traits>
#include <span>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/runtime/handle.hpp"
#include "ferry/runtime/recorder.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

class Tape;

/// What an op's backward rule sees: the forward inputs and output, the cotangent of the output
/// (d value / d output: its shape, element type and device), and one slot per input to fill with
/// that input's cotangent (left empty where an input has none: a mask, an index).
struct GradCall {
  std::span<Step* const> inputs;
  Step& output;
  const Handle& cotangent;
  std::span<Handle> grads;
  const Tape* tape = nullptr;  // what needs() asks (null: every input is needed)

  /// Whether input `i`'s cotangent can reach a variable: a rule may skip computing one that
  /// cannot (an op is submitted, and runs, when it is called: its result unused still costs).
  /// Asked of the tape on demand, so that a rule that never asks costs nothing.
  bool needs(std::size_t i) const;
};

/// An op's backward rule, written with ferry's ops (so it is itself differentiable). Empty for an
/// op without a gradient: one with an integer or bool output (comparisons, argmax), whose path
/// contributes zero, or a custom step given none, which throws NotDifferentiable when a
/// cotangent reaches it.
using BackwardFn = std::function<void(GradCall&)>;

class CopyWalk;  // autodiff/backward.hpp

/// What the rule of a group (TapeGroup) sees: member i's input and output (null where the
/// output is the input itself: its cotangent is the input's already), the cotangent of each
/// output (empty where none came), one slot per input for its cotangent, and the walk's copies
/// (see CopyWalk) when the group takes them and every member's cotangent is a copy along its
/// axis (null otherwise: the copies along its axis have ended, and its cotangents are summands).
struct GroupCall {
  std::span<Step* const> inputs;
  std::span<Step* const> outputs;
  std::span<Handle> cotangents;
  std::span<Handle> grads;
  CopyWalk* copies = nullptr;
};

/// Outputs that one call made together and whose cotangents go back together: a collective's,
/// one per member. Why not one node each: each member's cotangent would go back on its own, as
/// copies, where the transposed collective carries them all at once over the links.
struct TapeGroup {
  std::size_t size = 0;
  std::function<void(GroupCall&)> backward;
  // Where the call ran: the backward pass ends the copies along `axis` (-1: every axis) of
  // `mesh` (a mesh's state) before the rule, unless the rule `takes_copies` and every member
  // holds one (the all-reduce that made a replicated value: see CopyWalk).
  const void* mesh = nullptr;
  int axis = -1;
  bool takes_copies = false;
};

/// One op a tape recorded. Handles (not just references) keep the forward values the rule reads
/// alive, in the model too, until the backward pass has used them. A member of a group has no
/// `backward` of its own: its one input is the member's, its output the member's or empty.
struct TapeNode {
  std::vector<Handle> inputs;
  Handle output;
  BackwardFn backward;
  std::shared_ptr<const TapeGroup> group;
};

class Tape {
 public:
  /// A tape differentiating with respect to `variables`.
  explicit Tape(std::span<Step* const> variables) : parent_(t_tape) {
    for (Step* v : variables) tracked_.insert(v);
  }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  /// An op read `inputs` and made `output`: recorded when an input depends on a variable, and
  /// passed on to the enclosing tape, which decides the same for its own variables.
  void record(std::span<Step* const> inputs, Step& output, const BackwardFn& backward) {
    if (parent_ != nullptr) parent_->record(inputs, output, backward);
    bool depends = false;
    for (Step* in : inputs) {
      if (in == &output) return;  // the op gave back an input: nothing to record
      depends = depends || tracked_.contains(in);
    }
    if (!depends) return;
    TapeNode node{{}, Handle(Ref<Step>::share(&output)), backward, {}};
    node.inputs.reserve(inputs.size());
    for (Step* in : inputs) node.inputs.emplace_back(Ref<Step>::share(in));
    nodes_.push_back(std::move(node));
    tracked_.insert(&output);
  }

  /// A call made `outputs[i]` from (among others) `inputs[i]`, every output from every input:
  /// recorded, and passed on, as one node per member, one after another, sharing `group`, when
  /// an input depends on a variable. An output that is its own input (null) is not tracked
  /// again: it is the input.
  void record_group(std::span<Step* const> inputs, std::span<Step* const> outputs,
                    const std::shared_ptr<const TapeGroup>& group) {
    if (parent_ != nullptr) parent_->record_group(inputs, outputs, group);
    bool depends = false;
    for (Step* in : inputs) depends = depends || tracked_.contains(in);
    if (!depends) return;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      TapeNode node{{Handle(Ref<Step>::share(inputs[i]))},
                    outputs[i] != nullptr ? Handle(Ref<Step>::share(outputs[i])) : Handle(),
                    BackwardFn(), group};
      nodes_.push_back(std::move(node));
      if (outputs[i] != nullptr) tracked_.insert(outputs[i]);
    }
  }

  /// Whether `s` depends on a variable.
  bool tracks(const Step& s) const { return tracked_.contains(&s); }
  std::vector<TapeNode>& nodes() noexcept { return nodes_; }

 private:
  Tape* parent_;
  std::unordered_set<const Step*> tracked_;
  std::vector<TapeNode> nodes_;
};

inline bool GradCall::needs(std::size_t i) const {
  return tape == nullptr || tape->tracks(*inputs[i]);
}

/// Makes `tape` the innermost on this thread for the scope's lifetime; the function it runs
/// starts outside any op.
class TapeScope {
 public:
  explicit TapeScope(Tape& tape) noexcept
      : tape_(std::exchange(t_tape, &tape)), depth_(std::exchange(t_record_depth, 0)) {}
  ~TapeScope() {
    t_tape = tape_;
    t_record_depth = depth_;
  }
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* tape_;
  int depth_;
};

/// Reports an op whose output has element type `T` to `tape`. `rule` is
/// called as rule(std::type_identity<T>{}, call), and only for a floating T: an op with an
/// integer or bool output has no gradient, but is recorded all the same, so that a value
/// depending on the differentiated arguments only through it is known (and refused) as such.
template <Element T, class Rule>
void record_grad(Tape& tape, std::span<Step* const> inputs, Step& output, Rule rule) {
  if constexpr (Floating<T>) {
    tape.record(inputs, output, [rule](GradCall& c) { rule(std::type_identity<T>{}, c); });
  } else {
    tape.record(inputs, output, BackwardFn());
  }
}

/// Reports an op that has no gradient (a comparison, argmax).
inline void record_no_grad(Tape& tape, std::span<Step* const> inputs, Step& output) {
  tape.record(inputs, output, BackwardFn());
}

template <class T>
using Tag = std::type_identity<T>;

/// How to sum two cotangents of one array, for one element type.
using CotangentSum = Handle (*)(Handle, Handle);

/// The sum for element type `t`, set by the typed code that makes cotangents of `t` (set_grad),
/// null until some has. Why not a switch over the floating types where cotangents are summed:
/// it would instantiate `+`, and through it the backward rules, for bfloat16 and double in
/// every program, a float-only one too (a fifth of the compile time of a small program).
inline std::atomic<CotangentSum>& cotangent_sum(DType t) noexcept {
  static std::atomic<CotangentSum> sums[kDTypeCount] = {};
  return sums[static_cast<std::size_t>(t)];
}

/// The tape an op called outside any other op reports to (null when none records): for ops
/// that do not open a RecordScope (a transfer, a custom step).
inline Tape* outermost_tape() noexcept { return t_record_depth == 0 ? t_tape : nullptr; }

}  // namespace ferry::detail
