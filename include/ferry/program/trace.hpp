#pragma once
// Trace: what one run of a program's function did, recorded while it runs eagerly. Every
// array it sees is a value: an input, a constant it captured, or the output of a recorded op.
// Sizes and SymInt and SymFloat arguments are leaves of a SymTable; each fact the run turned
// them into is a guard. A trace that relied on something no guard can check is refused, with
// the reason.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/core/shape.hpp"
#include "ferry/core/sym_float.hpp"
#include "ferry/core/sym_int.hpp"
#include "ferry/program/sym_table.hpp"
#include "ferry/runtime/recorder.hpp"
#include "ferry/runtime/step.hpp"

namespace ferry::detail {

/// A parameter of a recorded op: node `node` of the SymTable, or the constant `value`.
struct SymParam {
  std::uint32_t node = 0;
  std::int64_t value = 0;
};

/// One recorded op, its arrays named by value id.
struct RecordedOp {
  std::string_view name;
  std::vector<std::uint32_t> inputs;
  std::vector<SymParam> params;
  ReplayFn replay;
  Elementwise elementwise;
  DirectFn direct = nullptr;
  std::uint32_t output = 0;
  /// The output's sizes as traced, and the node each symbolic size is (0 for a constant): a
  /// direct replay evaluates them instead of asking the op.
  Shape shape;
  std::array<std::uint32_t, kMaxRank> shape_nodes{};
  bool symbolic_shape = false;
};

/// Where a value comes from.
struct TraceValue {
  enum class Kind : std::uint8_t { input, constant, op } kind = Kind::input;
  std::uint32_t index = 0;  // input: the input's position; op: the op's
  Shape shape;              // as the function saw it (symbolic in symbolic mode)
};

/// A guard: node `node` must evaluate to `expected`.
struct Guard {
  std::uint32_t node = 0;
  std::int64_t expected = 0;
  friend auto operator<=>(const Guard&, const Guard&) = default;
};

/// A guard on a host flag the function read (a module's training mode): it must still hold
/// `expected`. A flag gone since (a module the function made and dropped) is what a new trace
/// would make again, so it holds.
struct FlagGuard {
  std::weak_ptr<const std::atomic<bool>> flag;
  bool expected = false;

  /// Whether this guards `f`: the same owner, which the weak reference keeps from being reused
  /// (an address could be, by a flag made after this one's module was dropped).
  bool guards(const std::shared_ptr<const std::atomic<bool>>& f) const noexcept {
    return !flag.owner_before(f) && !f.owner_before(flag);
  }

  bool holds() const noexcept {
    const std::shared_ptr<const std::atomic<bool>> f = flag.lock();
    return f == nullptr || f->load(std::memory_order_relaxed) == expected;
  }
};

class Trace final : public Recorder, public SymContext, public SymFloatContext {
 public:
  /// Starts a trace of a call with `inputs` and scalar arguments `args`, those marked in
  /// `floating_args` doubles (their words float_word's bits). In symbolic mode the sizes and the
  /// arguments marked in `symbolic_args` are symbols; everything else is guarded to keep its
  /// value.
  Trace(bool symbolic, std::span<Step* const> inputs, std::span<const std::int64_t> args,
        std::span<const bool> symbolic_args, std::span<const bool> floating_args)
      : SymContext(next_id()), args_(args.begin(), args.end()) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      Step& s = *inputs[i];
      if (const auto known = ids_.find(&s); known != ids_.end()) {
        input_values_.push_back(known->second);  // the same array given twice
        continue;
      }
      std::array<std::uint32_t, kMaxRank> nodes{};
      for (std::size_t d = 0; d < s.shape().rank(); ++d) {
        nodes[d] = table_.input_dim(i, d);
        if (!symbolic) guard(nodes[d], s.shape().dims()[d]);
      }
      const Shape shape = symbolic ? ShapeAccess::tag(s.shape(), id(), nodes) : s.shape();
      input_values_.push_back(
          add_value(s, {TraceValue::Kind::input, static_cast<std::uint32_t>(i), shape}));
    }
    for (std::size_t k = 0; k < args.size(); ++k) {
      const std::uint32_t node = table_.argument(k, floating_args[k]);
      if (!symbolic || !symbolic_args[k]) guard(node, args[k]);
      arg_nodes_.push_back(symbolic && symbolic_args[k] ? node : 0);
    }
  }

  /// Argument `k` as the function sees it.
  SymInt argument(std::size_t k) const {
    return SymAccess::make(args_[k], arg_nodes_[k] != 0 ? id() : 0, arg_nodes_[k]);
  }
  /// Floating argument `k` as the function sees it.
  SymFloat float_argument(std::size_t k) const {
    return SymFloatAccess::make(word_float(args_[k]), arg_nodes_[k] != 0 ? id() : 0, arg_nodes_[k]);
  }

  // ---- Recorder ----
  Shape shape_of(const Step& s) const override {
    const auto it = ids_.find(&s);
    return it != ids_.end() ? values_[it->second].shape : s.shape();
  }

  void record(OpCall call, Step& output, const Shape& shape) override {
    if (ids_.contains(&output)) return;  // the op gave back an array it was given
    add_op(std::move(call), output, shape);
  }

  /// Records `call` even when `output` is an array the trace knows (a collective that gives a
  /// device its own operand back must still be replayed: the other devices wait for it); from
  /// now on `output` is that op's value. Returns the value's id.
  std::uint32_t record_effect(OpCall call, Step& output, const Shape& shape) {
    return add_op(std::move(call), output, shape);
  }

  void refuse(std::string reason) override {
    if (refusal_.empty()) refusal_ = std::move(reason);
  }

  void depend_on_flag(const std::shared_ptr<const std::atomic<bool>>& flag,
                      bool value) noexcept override {
    for (const FlagGuard& g : flag_guards_) {
      if (g.guards(flag)) return;  // the first read decided; a flag keeps its value
    }
    try {
      flag_guards_.push_back({flag, value});
    } catch (...) {
      flag_lost_ = true;  // refusal() says so: without the guard a replay could be wrong
    }
  }

  // ---- SymContext ----
  std::uint32_t combine(SymOp op, std::uint32_t a, std::int64_t a_value, std::uint32_t b,
                        std::int64_t b_value) override {
    // x * 1, x / 1, x + 0 and x - 0 are x, and x * 0 is the constant 0, for every x: no node to
    // evaluate at each call (Shape::size() starts its product from 1).
    if (b == 0) {
      if ((b_value == 1 && (op == SymOp::mul || op == SymOp::div)) ||
          (b_value == 0 && (op == SymOp::add || op == SymOp::sub))) {
        return a;
      }
      if (b_value == 0 && op == SymOp::mul) return 0;
    }
    if (a == 0) {
      if ((a_value == 1 && op == SymOp::mul) || (a_value == 0 && op == SymOp::add)) return b;
      if (a_value == 0 && op == SymOp::mul) return 0;
    }
    if (a == 0) a = table_.constant(a_value);
    if (b == 0) b = table_.constant(b_value);
    return table_.op(op, a, b);
  }

  void guard(std::uint32_t node, std::int64_t expected) override {
    if (node != 0 && table_.node(node).kind != SymTable::Kind::constant) {
      guards_.insert({node, expected});
    }
  }

  // ---- SymFloatContext ----
  std::uint32_t combine_float(SymOp op, std::uint32_t a, double a_value, std::uint32_t b,
                              double b_value) override {
    if (a == 0) a = table_.float_constant(a_value);
    if (b == 0) b = table_.float_constant(b_value);
    return table_.float_op(op, a, b);
  }

  std::uint32_t int_to_float(std::uint32_t node) override { return table_.to_float(node); }

  // ---- what an entry is built from ----

  /// The value id of `s`: known, or a constant the function captured.
  std::uint32_t value_of(Step& s) {
    if (const auto it = ids_.find(&s); it != ids_.end()) return it->second;
    return add_value(s, {TraceValue::Kind::constant, 0, s.shape()});
  }

  const std::string& refusal() const noexcept {
    static const std::string lost = "a module's training mode was read and could not be noted";
    return refusal_.empty() && flag_lost_ ? lost : refusal_;
  }
  const SymTable& table() const noexcept { return table_; }
  const std::set<Guard>& guards() const noexcept { return guards_; }
  const std::vector<FlagGuard>& flag_guards() const noexcept { return flag_guards_; }
  const std::vector<TraceValue>& values() const noexcept { return values_; }
  std::vector<RecordedOp>& ops() noexcept { return ops_; }
  const std::vector<std::uint32_t>& input_values() const noexcept { return input_values_; }
  /// The step of value `v` (kept alive for as long as the trace).
  Step* step(std::uint32_t v) const noexcept { return steps_[v].get(); }

 private:
  static std::uint32_t next_id() noexcept {
    static std::atomic<std::uint32_t> counter{0};
    std::uint32_t id = counter.fetch_add(1, std::memory_order_relaxed) + 1;
    if (id == 0) id = counter.fetch_add(1, std::memory_order_relaxed) + 1;  // 0 means "no trace"
    return id;
  }

  std::uint32_t add_op(OpCall call, Step& output, const Shape& shape) {
    RecordedOp op;
    op.name = call.name;
    op.replay = std::move(call.replay);
    op.elementwise = call.elementwise;
    op.direct = call.direct;
    op.shape = ShapeAccess::plain(shape);
    for (Step* in : call.inputs) op.inputs.push_back(value_of(*in));
    for (const SymInt& p : call.params)
      op.params.push_back({SymAccess::node(p), SymAccess::value(p)});
    for (std::size_t d = 0; d < shape.rank(); ++d) {
      op.shape_nodes[d] = SymAccess::node(shape[d]);
      op.symbolic_shape = op.symbolic_shape || op.shape_nodes[d] != 0;
    }
    // A rule whose shape is not the one the op made cannot stand in for the op: such an op
    // replays through the op itself.
    if (!(op.shape == output.shape())) op.direct = nullptr;
    const std::uint32_t id =
        add_value(output, {TraceValue::Kind::op, static_cast<std::uint32_t>(ops_.size()), shape});
    op.output = id;
    ops_.push_back(std::move(op));
    return id;
  }

  std::uint32_t add_value(Step& s, TraceValue v) {
    const auto id = static_cast<std::uint32_t>(values_.size());
    values_.push_back(std::move(v));
    // Holding the step keeps its address from being reused by another step of this trace.
    steps_.push_back(Ref<Step>::share(&s));
    ids_[&s] = id;  // a step an effect gave back is that effect's value from now on
    return id;
  }

  SymTable table_;
  std::set<Guard> guards_;
  std::vector<std::int64_t> args_;
  std::vector<std::uint32_t> arg_nodes_;
  std::vector<TraceValue> values_;
  std::vector<Ref<Step>> steps_;
  std::unordered_map<const Step*, std::uint32_t> ids_;
  std::vector<std::uint32_t> input_values_;
  std::vector<RecordedOp> ops_;
  std::vector<FlagGuard> flag_guards_;
  bool flag_lost_ = false;
  std::string refusal_;
};

/// Makes `trace` the one recording on this thread for the scope's lifetime.
class TraceScope {
 public:
  explicit TraceScope(Trace& trace) noexcept
      : recorder_(std::exchange(t_recorder, &trace)),
        context_(std::exchange(t_sym_context, &trace)),
        float_context_(std::exchange(t_sym_float_context, &trace)),
        depth_(std::exchange(t_record_depth, 0)) {}
  ~TraceScope() {
    t_recorder = recorder_;
    t_sym_context = context_;
    t_sym_float_context = float_context_;
    t_record_depth = depth_;
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Recorder* recorder_;
  SymContext* context_;
  SymFloatContext* float_context_;
  int depth_;
};

}  // namespace ferry::detail
