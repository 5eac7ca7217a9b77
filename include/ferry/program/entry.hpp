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
  Entry(Trace& trace, std::vector<std::uint32_t> outputs,
        std::span<const std::uint32_t> effects = {})
      : table_(trace.table()),
        guards_(trace.guards().begin(), trace.guards().end()),
        flag_guards_(trace.flag_guards()),
        outputs_(std::move(outputs)) {
    const std::vector<TraceValue>& values = trace.values();
    kinds_.reserve(values.size());
    for (std::uint32_t v = 0; v < values.size(); ++v) {
      kinds_.push_back(values[v]);
      if (values[v].kind == TraceValue::Kind::constant)
        constants_.push_back({v, Ref<Step>::share(trace.step(v))});
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
    plan_donors();
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
    for (const FlagGuard& g : flag_guards_) {
      if (!g.holds()) return false;
    }
    return true;
  }

  /// The number of arrays a replay returns.
  std::size_t output_count() const noexcept { return outputs_.size(); }

  /// Submits the recorded ops for `inputs` and the expression values `env` of matches(); puts
  /// the outputs' handles, in order, into `out` (output_count() of them). `given`, empty or one
  /// per input, holds the handles the caller gave away (the others empty): the replay takes
  /// them over, so an input whose handle was the last may be donated to the step that reads
  /// it last, as an eager op donates a moved array (see plan_donors()).
  void replay(std::span<Step* const> inputs, const std::vector<std::int64_t>& env,
              std::span<Handle> out, std::span<Handle> given = {}) const {
    // A short program keeps its values' handles on the stack.
    std::array<Handle, 8> few;
    std::vector<Handle> many;
    if (kinds_.size() > few.size()) many.resize(kinds_.size());
    const std::span<Handle> slots = many.empty() ? std::span<Handle>(few) : std::span<Handle>(many);
    for (const auto& [v, i] : input_slots_) {
      // An alias's given handle stays with the caller until the replay ends: a second handle,
      // so an array passed twice is never donated.
      const bool taken = i < given.size() && given[i] && given[i].get() == inputs[i];
      slots[v] = taken ? std::move(given[i]) : Handle(Ref<Step>::share(inputs[i]));
    }
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
        if (!donate_alone(i, slots, env)) run(ops_[p.op], slots, env, direct, in, params);
      } else {
        submit_fused(p, patches_[i], slots, env, direct, in, params, donors_[i].mask);
      }
      for (std::uint32_t d = drop_at_[i]; d < drop_at_[i + 1]; ++d) slots[drops_[d]] = Handle();
    }
    for (std::size_t i = 0; i < outputs_.size(); ++i) out[i] = slots[outputs_[i]];
  }

  /// The guards and the steps, as text.
  std::string explain() const {
    SymText text(table_);
    std::string out =
        "  guards (" + std::to_string(guards_.size() + flag_guards_.size()) + "):";
    if (guards_.empty() && flag_guards_.empty()) out += " none";
    for (const Guard& g : guards_) out += "\n    " + text.guard(g.node, g.expected);
    for (const FlagGuard& g : flag_guards_) {
      out += std::string("\n    a module in ") + (g.expected ? "training" : "evaluation") + " mode";
    }
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
                    std::vector<Step*>& in, std::vector<std::int64_t>& params,
                    std::uint32_t given) const {
    // With a captured array freed (not `direct`), op by op: the first to read it throws as
    // its eager call would, naming it, not the fused kernel.
    if (direct && launch_program(p.op, p.program, p.externals, patches, slots, env, given))
      return;
    for (std::uint32_t m : p.members) run(ops_[m], slots, env, direct, in, params);
  }

  /// Submits `program` over `externals` as op `op`'s result; false where the externals cannot
  /// share a kernel (nothing submitted). `given` marks the externals it may donate.
  bool launch_program(std::uint32_t op, const std::shared_ptr<const FusedProgram>& program,
                      const std::vector<std::uint32_t>& externals,
                      const std::vector<ScalarPatch>& patches, std::span<Handle> slots,
                      const std::vector<std::int64_t>& env, std::uint32_t given) const {
    std::array<Step*, 8> few;
    std::vector<Step*> many;
    if (externals.size() > few.size()) many.resize(externals.size());
    const std::span<Step*> in = many.empty() ? std::span<Step*>(few.data(), externals.size())
                                             : std::span<Step*>(many);
    for (std::size_t e = 0; e < externals.size(); ++e) in[e] = slots[externals[e]].get();
    std::shared_ptr<const FusedProgram> run = program;
    if (!patches.empty()) {
      auto own = std::make_shared<FusedProgram>(*program);
      for (const ScalarPatch& patch : patches) {
        patch.write(env[patch.node], own->instrs[patch.instr].scalar.data());
      }
      run = std::move(own);
    }
    Handle out = ops_[op].elementwise.launch(run, in, given);
    if (!out) return false;
    slots[ops_[op].output] = std::move(out);
    return true;
  }

  /// Plan step `i`, an op submitted alone that reads a program input last: when the replay
  /// holds that input's last handle, submits the op as a kernel of one instruction (what a
  /// fused run of one would be: the op's own kernel, its step named and costed as the op's),
  /// so that its output can take the input's buffer. False, nothing submitted, otherwise: the
  /// op then replays as it always does.
  bool donate_alone(std::size_t i, std::span<Handle> slots,
                    const std::vector<std::int64_t>& env) const {
    const Donors& d = donors_[i];
    if (d.alone == nullptr) return false;
    const RecordedOp& op = ops_[plan_[i].op];
    // An input the output can take: its last handle, no view, and no other input larger (an
    // elementwise output has its largest input's shape; launch() checks the rest).
    bool last = false;
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
      const Step* s = slots[op.inputs[k]].get();
      bool largest = true;
      for (std::uint32_t v : op.inputs) {
        largest = largest && slots[v].get()->shape().numel() <= s->shape().numel();
      }
      last = last || (((d.mask >> k) & 1u) != 0 && s->handles() == 1 && s->views() == 0 && largest);
    }
    return last && launch_program(plan_[i].op, d.alone, op.inputs, d.patches, slots, env, d.mask);
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

  /// Per plan step, the positions among what it reads (a fused run's externals, a single op's
  /// inputs) of program inputs it reads last: a replay given such an input's last handle may
  /// write the step's output into that input's buffer. A single elementwise op also gets a
  /// program of one instruction to do it with (and the patch of a scalar it reads per call).
  void plan_donors() {
    donors_.resize(plan_.size());
    for (std::size_t i = 0; i < plan_.size(); ++i) {
      const PlanStep& p = plan_[i];
      const RecordedOp& op = ops_[p.op];
      const std::vector<std::uint32_t>& reads = p.program != nullptr ? p.externals : op.inputs;
      Donors& d = donors_[i];
      for (std::uint32_t k = drop_at_[i]; k < drop_at_[i + 1]; ++k) {
        const std::uint32_t v = drops_[k];
        if (kinds_[v].kind != TraceValue::Kind::input) continue;
        for (std::size_t r = 0; r < reads.size() && r < 32; ++r) {
          if (reads[r] == v) d.mask |= 1u << r;
        }
      }
      if (d.mask == 0 || p.program != nullptr || op.elementwise.launch == nullptr ||
          op.inputs.empty() || op.inputs.size() > 2) {
        continue;
      }
      auto alone = std::make_shared<FusedProgram>();
      FusedInstr ins;
      ins.fn = op.elementwise.fn;
      ins.scalar = op.elementwise.scalar;
      ins.a = {true, 0};
      ins.binary = op.inputs.size() == 2;
      if (ins.binary) ins.b = {true, 1};
      alone->instrs.push_back(ins);
      alone->name = std::string(op.name);
      d.alone = std::move(alone);
      if (op.elementwise.scalar_from_param != nullptr && !op.params.empty() &&
          op.params[0].node != 0) {
        d.patches.push_back({0, op.params[0].node, op.elementwise.scalar_from_param});
      }
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
  std::vector<FlagGuard> flag_guards_;
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
  struct Donors {
    std::uint32_t mask = 0;                     // bit r: read r is an input read last here
    std::shared_ptr<const FusedProgram> alone;  // a single elementwise op's own kernel
    std::vector<ScalarPatch> patches;           // ...and the scalar it reads per call
  };
  std::vector<Donors> donors_;  // per plan step (plan_donors())
};

}  // namespace ferry::detail
