#pragma once
// Entry: one cached trace of a program. It matches a call when the inputs have the traced
// ranks, devices and aliasing and every guard holds for the call's sizes and arguments; a
// replay then submits the recorded ops (fused where it can) without running the function.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/program/fusion.hpp"
#include "ferry/program/sym_table.hpp"
#include "ferry/program/trace.hpp"
#include "ferry/runtime/handle.hpp"

namespace ferry::detail {

class Entry {
 public:
  /// Builds the entry of `trace`, whose function returned the values `outputs`.
  Entry(Trace& trace, std::vector<std::uint32_t> outputs)
      : table_(trace.table()),
        guards_(trace.guards().begin(), trace.guards().end()),
        outputs_(std::move(outputs)) {
    const std::vector<TraceValue>& values = trace.values();
    kinds_.reserve(values.size());
    for (std::uint32_t v = 0; v < values.size(); ++v) {
      kinds_.push_back(values[v]);
      if (values[v].kind == TraceValue::Kind::constant) constants_.push_back({v, Ref<Step>::share(trace.step(v))});
    }
    for (std::size_t i = 0; i < trace.input_values().size(); ++i) {
      const std::uint32_t v = trace.input_values()[i];
      const Step& s = *trace.step(v);
      inputs_.push_back({s.shape().rank(), s.device(), values[v].index});
    }
    // Only the ops an output depends on are replayed.
    std::vector<RecordedOp>& ops = trace.ops();
    std::vector<bool> live(values.size(), false);
    for (std::uint32_t v : outputs_) live[v] = true;
    for (std::size_t i = ops.size(); i-- > 0;) {
      if (!live[ops[i].output]) continue;
      for (std::uint32_t v : ops[i].inputs) live[v] = true;
    }
    for (RecordedOp& op : ops) {
      if (live[op.output]) ops_.push_back(std::move(op));
    }
    producer_.assign(values.size(), ~0u);
    std::vector<std::uint32_t> uses(values.size(), 0);
    for (std::uint32_t i = 0; i < ops_.size(); ++i) {
      producer_[ops_[i].output] = i;
      for (std::uint32_t v : ops_[i].inputs) ++uses[v];
    }
    for (std::uint32_t v : outputs_) uses[v] += 2;  // an output must exist as an array
    plan_ = plan_fusion(ops_, producer_, uses, values);
    // A replay drops its handle to a value once the last step reading it is submitted, as the
    // eager code's handles would go: the runtime frees the buffer as soon as it can.
    std::vector<std::size_t> last(values.size(), plan_.size());
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const PlanStep& p = plan_[i];
      if (p.program != nullptr) {
        for (std::uint32_t v : p.externals) last[v] = i;
      }
      for (std::uint32_t m : p.members.empty() ? std::vector<std::uint32_t>{p.op} : p.members) {
        for (std::uint32_t v : ops_[m].inputs) last[v] = i;
      }
    }
    for (std::uint32_t v : outputs_) last[v] = plan_.size();
    drops_.resize(plan_.size());
    for (std::uint32_t v = 0; v < values.size(); ++v) {
      if (last[v] < plan_.size()) drops_[last[v]].push_back(v);
    }
  }

  /// Whether a call with `inputs` (their steps) and scalar `args` may replay this entry; fills
  /// `env` with the value of every expression for that call.
  bool matches(std::span<Step* const> inputs, std::span<const std::int64_t> args,
               std::vector<std::int64_t>& env, std::vector<const Shape*>& shapes) const {
    shapes.clear();
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      const Step& s = *inputs[i];
      const InputSignature& sig = inputs_[i];
      if (s.shape().rank() != sig.rank || s.device() != sig.device) return false;
      std::size_t first = 0;
      while (inputs[first] != inputs[i]) ++first;
      if (first != sig.first_alias) return false;
      shapes.push_back(&s.shape());
    }
    table_.evaluate(shapes, args, env);
    for (const Guard& g : guards_) {
      if (env[g.node] != g.expected) return false;
    }
    return true;
  }

  /// Submits the recorded ops for `inputs` and the expression values `env` of matches();
  /// returns the outputs' handles in order.
  std::vector<Handle> replay(std::span<Step* const> inputs, const std::vector<std::int64_t>& env) const {
    std::vector<Handle> slots(kinds_.size());
    for (std::uint32_t v = 0; v < kinds_.size(); ++v) {
      if (kinds_[v].kind == TraceValue::Kind::input) slots[v] = Handle(Ref<Step>::share(inputs[kinds_[v].index]));
    }
    for (const auto& [v, step] : constants_) slots[v] = Handle(step);
    std::vector<Step*> in;
    std::vector<std::int64_t> params;
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      submit(plan_[i], slots, env, in, params);
      for (std::uint32_t v : drops_[i]) slots[v] = Handle();
    }
    std::vector<Handle> out;
    out.reserve(outputs_.size());
    for (std::uint32_t v : outputs_) out.push_back(slots[v]);
    return out;
  }

  /// The guards and the steps, as text.
  std::string explain() const {
    std::string out = "  guards (" + std::to_string(guards_.size()) + "):";
    if (guards_.empty()) out += " none";
    for (const Guard& g : guards_) out += "\n    " + table_.describe_guard(g.node, g.expected);
    out += "\n  steps (" + std::to_string(plan_.size()) + " submitted for " +
           std::to_string(ops_.size()) + " ops):";
    for (const PlanStep& p : plan_) {
      const RecordedOp& op = ops_[p.op];
      out += "\n    v" + std::to_string(op.output) + " = ";
      if (p.program != nullptr) {
        out += p.program->name + "(" + list(p.externals) + ")";
      } else {
        std::string args = list(op.inputs);
        for (const SymParam& param : op.params) {
          if (!args.empty()) args += ", ";
          args += param.node != 0 ? table_.describe(param.node) : std::to_string(param.value);
        }
        out += std::string(op.name) + "(" + args + ")";
      }
    }
    out += "\n  returns " + list(outputs_);
    return out;
  }

 private:
  struct InputSignature {
    std::size_t rank = 0;
    std::shared_ptr<DeviceState> device;
    std::size_t first_alias = 0;  // the first input that is the same array
  };

  /// Submits one step of the plan: a fused run (op by op if its inputs cannot share a kernel
  /// after all), or one op.
  void submit(const PlanStep& p, std::vector<Handle>& slots, const std::vector<std::int64_t>& env,
              std::vector<Step*>& in, std::vector<std::int64_t>& params) const {
    if (p.program == nullptr) {
      run(ops_[p.op], slots, env, in, params);
      return;
    }
    in.clear();
    for (std::uint32_t v : p.externals) in.push_back(slots[v].get());
    if (Handle fused = ops_[p.op].elementwise.launch(p.program, in)) {
      slots[ops_[p.op].output] = std::move(fused);
      return;
    }
    for (std::uint32_t m : p.members) run(ops_[m], slots, env, in, params);
  }

  void run(const RecordedOp& op, std::vector<Handle>& slots, const std::vector<std::int64_t>& env,
           std::vector<Step*>& in, std::vector<std::int64_t>& params) const {
    in.clear();
    for (std::uint32_t v : op.inputs) in.push_back(slots[v].get());
    params.clear();
    for (const SymParam& p : op.params) params.push_back(p.node != 0 ? env[p.node] : p.value);
    slots[op.output] = op.replay(in, params);
  }

  std::string list(const std::vector<std::uint32_t>& values) const {
    std::string out;
    for (std::uint32_t v : values) {
      if (!out.empty()) out += ", ";
      switch (kinds_[v].kind) {
        case TraceValue::Kind::input: out += "in" + std::to_string(kinds_[v].index); break;
        case TraceValue::Kind::constant: out += "const v" + std::to_string(v); break;
        case TraceValue::Kind::op: out += "v" + std::to_string(v); break;
      }
    }
    return out;
  }

  SymTable table_;
  std::vector<Guard> guards_;
  std::vector<std::uint32_t> outputs_;
  std::vector<TraceValue> kinds_;
  std::vector<std::pair<std::uint32_t, Ref<Step>>> constants_;
  std::vector<InputSignature> inputs_;
  std::vector<RecordedOp> ops_;
  std::vector<std::uint32_t> producer_;
  std::vector<PlanStep> plan_;
  std::vector<std::vector<std::uint32_t>> drops_;  // per plan step: the values it reads last
};

}  // namespace ferry::detail
