#pragma once
// The seam through which ops tell a program trace what they did. Ops live above the program
// layer, so they see only this interface: while a trace runs on this thread, each public op
// reports its call (inputs, symbolic parameters, how to submit it again for new inputs, and
// the symbolic shape of its output). Outside a trace all of it costs one thread-local load.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/core/dtype.hpp"
#include "ferry/core/shape.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/runtime/handle.hpp"
#include "ferry/runtime/ref.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// One elementwise operation on `n` values of one element type, over raw pointers: what a fused
/// kernel chains. `b` is null for a unary or scalar op; `scalar` holds the scalar operand.
using ElementwiseFn = void (*)(const void* a, const void* b, void* out, std::size_t n,
                               const std::byte* scalar);

struct FusedProgram;

/// Submits a fused kernel for `program` reading `externals` (see ops/fused.hpp), one per element
/// type; a null result when the externals do not share one shape and order. `given` has bit i
/// set when the replay gave external i away (a program input passed with std::move, read last
/// here): the kernel may write its output into that buffer, as launch() decides.
using FusedLaunch = Handle (*)(const std::shared_ptr<const FusedProgram>& program,
                                  std::span<Step* const> externals, std::uint32_t given);

/// Writes into `scalar` the scalar operand an ElementwiseFn reads, from the op's first
/// parameter as a replay evaluated it (a floating scalar's word: core/sym_float.hpp).
using ScalarFromParam = void (*)(std::int64_t param, std::byte* scalar);

/// How an op that may be fused runs: same-shape operands in, same shape and type out.
struct Elementwise {
  ElementwiseFn fn = nullptr;
  FusedLaunch launch = nullptr;
  DType dtype = DType::float32;
  std::array<std::byte, 16> scalar{};
  /// Set when the scalar is an input of the trace (a SymFloat): a replay writes each call's
  /// value over the traced one.
  ScalarFromParam scalar_from_param = nullptr;
};

/// Submits an op again for new inputs and evaluated parameters; returns its output.
using ReplayFn = std::function<Handle(std::span<Step* const> inputs,
                                         std::span<const std::int64_t> params)>;

/// What a replay hands an op's direct submission: inputs whose devices and sizes the trace's
/// guards vouch for (the op would accept them and decide as it did when traced), the output
/// shape the trace computed, evaluated for this call, and the op's evaluated parameters.
/// `name` is the op's OpCall::name, a literal (static storage): the replayed step lends it
/// (StepName::of_static) instead of copying it, as the eager op's step would.
struct DirectCall {
  std::string_view name;
  std::span<Step* const> inputs;
  const Shape& shape;
  std::span<const std::int64_t> params;
};

/// Submits an op's step for a replay without what the trace already knows: no checks, no shape
/// inference, no symbolic rules; the step is the one the op would submit.
using DirectFn = Handle (*)(const DirectCall& call);

/// One op call, as a trace records it.
struct OpCall {
  std::string_view name;
  std::vector<Step*> inputs;
  std::vector<SymInt> params;
  ReplayFn replay;
  /// Set for an op a replay may fuse with its neighbours.
  Elementwise elementwise{};
  /// Set for an op a replay may submit directly; `replay` serves where it may not (an input
  /// freed since, a shape the trace did not compute). An op that sets it names itself with a
  /// literal: DirectCall::name is lent to every replayed step.
  DirectFn direct = nullptr;
};

/// What a program trace (program/trace.hpp) implements.
class Recorder {
 public:
  /// The shape of `s` as the traced function sees it: symbolic for the program's inputs and
  /// for what ops made from them.
  virtual Shape shape_of(const Step& s) const = 0;
  /// Records `call`, which made `output` with the symbolic shape `shape`.
  virtual void record(OpCall call, Step& output, const Shape& shape) = 0;
  /// The trace relied on something no guard can check; it will not be cached.
  virtual void refuse(std::string reason) = 0;
  /// The traced function read a host flag that steers what it submits (a module's training
  /// mode) and saw `value`: a replay needs the flag to hold it still.
  virtual void depend_on_flag(const std::shared_ptr<const std::atomic<bool>>& flag,
                              bool value) noexcept = 0;

 protected:
  ~Recorder() = default;
};

class Tape;  // runtime/tape.hpp

/// The trace recording on this thread, the innermost gradient tape, and how deep in op calls
/// they are (only the outermost op records: an op built from other ops is one step of the
/// program, and one node of the tape).
inline thread_local Recorder* t_recorder = nullptr;
inline thread_local Tape* t_tape = nullptr;
inline thread_local int t_record_depth = 0;

/// Marks an op call: recorder() is the trace and tape() the gradient tape to report to, when
/// this call is the outermost op; null otherwise.
class RecordScope {
 public:
  RecordScope() noexcept : tracing_(t_recorder != nullptr || t_tape != nullptr) {
    if (tracing_) outermost_ = t_record_depth++ == 0;
  }
  ~RecordScope() {
    if (tracing_) --t_record_depth;
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

  Recorder* recorder() const noexcept { return outermost_ ? t_recorder : nullptr; }
  Tape* tape() const noexcept { return outermost_ ? t_tape : nullptr; }

 private:
  bool tracing_;
  bool outermost_ = false;
};

/// Called for every step submitted: a step made outside any recorded op (an import, a custom
/// kernel) cannot be replayed, so the trace is refused.
inline void note_submitted(const Step& s) {
  if (t_recorder != nullptr && t_record_depth == 0) [[unlikely]] {
    t_recorder->refuse("'" + s.info().name.to_string() +
                       "' cannot be replayed: it is not an op a program records");
  }
}

/// Called by exports and other reads of values or timing: a value that reaches the host while
/// tracing may steer the function without a guard.
inline void note_escape(std::string_view what) {
  if (t_recorder != nullptr) [[unlikely]] {
    t_recorder->refuse(std::string(what) +
                       " inside the traced function: the host saw a value no guard can check");
  }
}

/// Called by calls that change what the traced function does not return (an optimizer's step
/// overwrites arrays and counts steps on the host): a replay would not repeat the change, so
/// the trace is refused and the program runs its function every time.
inline void note_side_effect(std::string_view what) {
  if (t_recorder != nullptr) [[unlikely]] {
    t_recorder->refuse(std::string(what) + " inside the traced function changes state the "
                                            "program does not return");
  }
}

/// Called where host code reads a flag that steers what it submits (nn::Module::is_training):
/// a trace records it, and its replays check it.
inline void note_flag_read(const std::shared_ptr<std::atomic<bool>>& flag, bool value) noexcept {
  if (t_recorder != nullptr) [[unlikely]] t_recorder->depend_on_flag(flag, value);
}

/// The shape of `s` the traced function sees (symbolic in a trace), else its plain shape.
inline Shape user_shape(const Step& s) {
  if (t_recorder != nullptr) [[unlikely]] return t_recorder->shape_of(s);
  return s.shape();
}

}  // namespace ferry::detail
