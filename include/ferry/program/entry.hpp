#pragma once
// Entry: one cached trace of a program. It matches a call when the inputs have the traced
// ranks, devices and aliasing and every guard holds for the call's sizes and arguments; a
// replay then submits the recorded ops (fused where it can) without running the function.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/program/cache_index.hpp"
#include "ferry/program/fusion.hpp"
#include "ferry/program/sym_table.hpp"
#include "ferry/program/sym_text.hpp"
#include "ferry/program/trace.hpp"
#include "ferry/runtime/handle.hpp"

namespace ferry::detail {

class Entry {
 public:
  /// Builds the entry of `trace`, whose function returned the values `outputs`. The ops that
  /// made `effects` run in every replay even when no output needs them (a collective, which
  /// every device must join); such a value nothing reads is dropped as soon as it is made.
  Entry(Trace& trace, std::vector<std::uint32_t> outputs, std::span<const std::uint32_t> effects = {})
      : table_(trace.table()),
        guards_(trace.guards().begin(), trace.guards().end()),
        outputs_(std::move(outputs)) {
    const std::vector<TraceValue>& values = trace.values();
    kinds_.reserve(values.size());
    for (std::uint32_t v = 0; v < values.size(); ++v) {
      kinds_.push_back(values[v]);
      if (values[v].kind == TraceValue::Kind::constant) constants_.push_back({v, Ref<Step>::share(trace.step(v))});
      if (values[v].kind == TraceValue::Kind::input) input_slots_.push_back({v, values[v].index});
    }
    for (std::size_t i = 0; i < trace.input_values().size(); ++i) {
      const std::uint32_t v = trace.input_values()[i];
      const Step& s = *trace.step(v);
      inputs_.push_back({s.shape().rank(), s.device(), values[v].index});
    }
    build_key();
    // Only the ops an output depends on are replayed.
    std::vector<RecordedOp>& ops = trace.ops();
    std::vector<bool> live(values.size(), false);
    for (std::uint32_t v : outputs_) live[v] = true;
    for (std::uint32_t v : effects) live[v] = true;
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
    // A fused kernel holds its ops' scalars; one that is an input of the trace changes per call.
    patches_.resize(plan_.size());
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      for (std::uint32_t k = 0; k < plan_[i].members.size() && plan_[i].program != nullptr; ++k) {
        const RecordedOp& m = ops_[plan_[i].members[k]];
        if (m.elementwise.scalar_from_param != nullptr && !m.params.empty() &&
            m.params[0].node != 0) {
          patches_[i].push_back({k, m.params[0].node, m.elementwise.scalar_from_param});
        }
      }
    }
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
    for (std::uint32_t v : effects) {
      for (std::size_t i = 0; i < plan_.size() && last[v] == plan_.size(); ++i) {
        if (ops_[plan_[i].op].output == v) last[v] = i;
      }
    }
    for (std::uint32_t v : outputs_) last[v] = plan_.size();
    // Flattened: plan step i drops drops_[drop_at_[i]] up to drops_[drop_at_[i + 1]].
    drop_at_.assign(plan_.size() + 1, 0);
    for (std::uint32_t v = 0; v < values.size(); ++v) {
      if (last[v] < plan_.size()) ++drop_at_[last[v] + 1];
    }
    for (std::size_t i = 0; i < plan_.size(); ++i) drop_at_[i + 1] += drop_at_[i];
    drops_.resize(drop_at_.back());
    std::vector<std::uint32_t> filled(drop_at_.begin(), drop_at_.end() - 1);
    for (std::uint32_t v = 0; v < values.size(); ++v) {
      if (last[v] < plan_.size()) drops_[filled[last[v]]++] = v;
    }
  }

  /// The leaves of a call this entry's guards pin, and the key a matching call has (see
  /// CacheIndex): a call of another key breaks a guard or the signature.
  const KeySchema& key_schema() const noexcept { return schema_; }
  std::uint64_t key() const noexcept { return key_; }

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

  /// The number of arrays a replay returns.
  std::size_t output_count() const noexcept { return outputs_.size(); }

  /// Submits the recorded ops for `inputs` and the expression values `env` of matches(); puts
  /// the outputs' handles, in order, into `out` (output_count() of them).
  void replay(std::span<Step* const> inputs, const std::vector<std::int64_t>& env,
              std::span<Handle> out) const {
    // A short program keeps its values' handles on the stack.
    std::array<Handle, 8> few;
    std::vector<Handle> many;
    if (kinds_.size() > few.size()) many.resize(kinds_.size());
    const std::span<Handle> slots = many.empty() ? std::span<Handle>(few) : std::span<Handle>(many);
    for (const auto& [v, i] : input_slots_) slots[v] = Handle(Ref<Step>::share(inputs[i]));
    // The inputs are checked by the call and what the replay makes is fresh: only a captured
    // array can have been freed by deallocate(force) since the trace. Then every op goes
    // through the op itself, which throws as an eager call would.
    bool direct = true;
    for (const auto& [v, step] : constants_) {
      slots[v] = Handle(step);
      direct = direct && !step->freed();
    }
    std::vector<Step*> in;
    std::vector<std::int64_t> params;
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const PlanStep& p = plan_[i];
      if (p.program == nullptr) {
        run(ops_[p.op], slots, env, direct, in, params);
      } else {
        submit_fused(p, patches_[i], slots, env, direct, in, params);
      }
      for (std::uint32_t d = drop_at_[i]; d < drop_at_[i + 1]; ++d) slots[drops_[d]] = Handle();
    }
    for (std::size_t i = 0; i < outputs_.size(); ++i) out[i] = slots[outputs_[i]];
  }

  /// The guards and the steps, as text.
  std::string explain() const {
    SymText text(table_);
    std::string out = "  guards (" + std::to_string(guards_.size()) + "):";
    if (guards_.empty()) out += " none";
    for (const Guard& g : guards_) out += "\n    " + text.guard(g.node, g.expected);
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
          args += param.node != 0 ? text.expression(param.node) : std::to_string(param.value);
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

  /// The key a call must have to pass the signature checks and the guards on leaves: the
  /// same hash as call_key() over the values they expect.
  void build_key() {
    std::vector<std::pair<KeyLeaf, std::int64_t>> pinned;
    for (const Guard& g : guards_) {
      const SymTable::Node& n = table_.node(g.node);
      if (n.kind == SymTable::Kind::input_dim) pinned.push_back({{false, n.a, n.b}, g.expected});
      if (n.kind == SymTable::Kind::argument) pinned.push_back({{true, n.a, 0}, g.expected});
    }
    std::sort(pinned.begin(), pinned.end());
    KeyHash h;
    for (const InputSignature& sig : inputs_) {
      schema_.ranks.push_back(sig.rank);
      h.add(reinterpret_cast<std::uintptr_t>(sig.device.get()));
      h.add(sig.first_alias);
    }
    for (const auto& [leaf, value] : pinned) {
      schema_.leaves.push_back(leaf);
      h.add(static_cast<std::uint64_t>(value));
    }
    key_ = h.value();
  }

  /// Where a replay writes a scalar input's value into a fused kernel: instruction `instr` of
  /// the plan step's program takes node `node`'s value.
  struct ScalarPatch {
    std::uint32_t instr = 0;
    std::uint32_t node = 0;
    ScalarFromParam write = nullptr;
  };

  /// Submits a fused run, op by op if its inputs cannot share a kernel after all. A run with
  /// scalar inputs (`patches`) gets a copy of its program holding this call's values: the
  /// kernels of earlier calls may still be reading theirs.
  void submit_fused(const PlanStep& p, const std::vector<ScalarPatch>& patches,
                    std::span<Handle> slots, const std::vector<std::int64_t>& env, bool direct,
                    std::vector<Step*>& in, std::vector<std::int64_t>& params) const {
    in.clear();
    for (std::uint32_t v : p.externals) in.push_back(slots[v].get());
    std::shared_ptr<const FusedProgram> program = p.program;
    if (!patches.empty()) {
      auto own = std::make_shared<FusedProgram>(*p.program);
      for (const ScalarPatch& patch : patches) {
        patch.write(env[patch.node], own->instrs[patch.instr].scalar.data());
      }
      program = std::move(own);
    }
    if (Handle fused = ops_[p.op].elementwise.launch(program, in)) {
      slots[ops_[p.op].output] = std::move(fused);
      return;
    }
    for (std::uint32_t m : p.members) run(ops_[m], slots, env, direct, in, params);
  }

  /// Submits one op: straight to the runtime where the op allows it, else through the op.
  void run(const RecordedOp& op, std::span<Handle> slots, const std::vector<std::int64_t>& env,
           bool direct, std::vector<Step*>& in, std::vector<std::int64_t>& params) const {
    // Most ops read one to three arrays and take no parameter: no vector to size for them.
    std::array<Step*, 4> few_in;
    std::array<std::int64_t, 4> few_params;
    const std::size_t n_in = op.inputs.size();
    const std::size_t n_params = op.params.size();
    if (n_in > few_in.size()) in.resize(n_in);
    if (n_params > few_params.size()) params.resize(n_params);
    Step** ins = n_in > few_in.size() ? in.data() : few_in.data();
    std::int64_t* values = n_params > few_params.size() ? params.data() : few_params.data();
    for (std::size_t i = 0; i < n_in; ++i) ins[i] = slots[op.inputs[i]].get();
    for (std::size_t i = 0; i < n_params; ++i) {
      values[i] = op.params[i].node != 0 ? env[op.params[i].node] : op.params[i].value;
    }
    const std::span<Step* const> in_span(ins, n_in);
    const std::span<const std::int64_t> param_span(values, n_params);
    Handle& out = slots[op.output];
    if (op.direct == nullptr || !direct) [[unlikely]] {
      out = op.replay(in_span, param_span);
      return;
    }
    if (!op.symbolic_shape) {
      out = op.direct({op.name, in_span, op.shape, param_span});
      return;
    }
    const std::span<const std::int64_t> traced = op.shape.dims();
    std::array<std::int64_t, kMaxRank> dims;
    bool same = true;  // the traced sizes again: no new Shape to build
    for (std::size_t d = 0; d < traced.size(); ++d) {
      dims[d] = op.shape_nodes[d] != 0 ? env[op.shape_nodes[d]] : traced[d];
      same = same && dims[d] == traced[d];
    }
    if (same) {
      out = op.direct({op.name, in_span, op.shape, param_span});
    } else {
      const Shape shape(std::span<const std::int64_t>(dims.data(), traced.size()));
      out = op.direct({op.name, in_span, shape, param_span});
    }
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
  KeySchema schema_;
  std::uint64_t key_ = 0;
  std::vector<std::uint32_t> outputs_;
  std::vector<TraceValue> kinds_;
  std::vector<std::pair<std::uint32_t, Ref<Step>>> constants_;
  std::vector<InputSignature> inputs_;
  std::vector<RecordedOp> ops_;
  std::vector<std::uint32_t> producer_;
  std::vector<PlanStep> plan_;
  std::vector<std::vector<ScalarPatch>> patches_;  // per plan step: its scalar inputs
  std::vector<std::pair<std::uint32_t, std::uint32_t>> input_slots_;  // (value, input)
  std::vector<std::uint32_t> drops_;    // per plan step, the values it reads last, in order
  std::vector<std::uint32_t> drop_at_;  // where each plan step's drops start
};

}  // namespace ferry::detail
