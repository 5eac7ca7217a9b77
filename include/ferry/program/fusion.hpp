#pragma once
// Fusion: the plan by which a replay submits a trace's ops. A run of elementwise ops of one
// element type, where each op's result feeds only the next op of the run, becomes one fused
// kernel (ops/fused.hpp): one modeled step, one pass over memory, no intermediate buffers.
// Everything else is submitted op by op.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ops/fused.hpp"
#include "ferry/program/trace.hpp"

namespace ferry::detail {

/// One submission of a replay: a recorded op, or a fused run of them.
struct PlanStep {
  std::uint32_t op = 0;                 // the op, or the run's last op
  std::vector<std::uint32_t> members;   // a fused run's ops in order; empty for a single op
  std::vector<std::uint32_t> externals; // the values a fused run reads
  std::shared_ptr<const FusedProgram> program;
};

/// The plan for `ops`, given who produces each value, how many times each is used (`uses`; a
/// program output counts as a use no kernel can absorb) and the values' shapes as traced.
/// Intermediate values of a run have the run's output shape (the guards keep it so); smaller
/// operands (a bias) are read by the kernel as inputs that repeat.
inline std::vector<PlanStep> plan_fusion(const std::vector<RecordedOp>& ops,
                                         const std::vector<std::uint32_t>& producer,
                                         const std::vector<std::uint32_t>& uses,
                                         const std::vector<TraceValue>& values) {
  constexpr std::uint32_t kNone = ~0u;
  // run[i]: the ops fused into op i so far (op i last); emptied when op i joins a later run.
  std::vector<std::vector<std::uint32_t>> run(ops.size());
  std::vector<bool> absorbed(ops.size(), false);
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    const RecordedOp& op = ops[i];
    if (op.elementwise.fn == nullptr) continue;
    std::vector<std::uint32_t> members;
    for (std::uint32_t v : op.inputs) {
      const std::uint32_t p = producer[v];
      if (p == kNone || absorbed[p] || ops[p].elementwise.fn == nullptr || uses[v] != 1 ||
          ops[p].elementwise.dtype != op.elementwise.dtype ||
          !(ShapeAccess::plain(values[v].shape) == ShapeAccess::plain(values[op.output].shape))) {
        continue;
      }
      members.insert(members.end(), run[p].begin(), run[p].end());
      if (run[p].empty()) members.push_back(p);
      run[p].clear();
      absorbed[p] = true;
    }
    if (members.empty()) continue;
    std::sort(members.begin(), members.end());
    members.push_back(i);
    run[i] = std::move(members);
  }

  std::vector<PlanStep> plan;
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    if (absorbed[i]) continue;
    PlanStep step;
    step.op = i;
    if (!run[i].empty()) {
      step.members = run[i];
      auto program = std::make_shared<FusedProgram>();
      // Values made inside the run live in registers; the rest are the kernel's inputs. The
      // first input is the one the eager chain's output would have taken its memory space
      // from: follow first operands back from the last op.
      std::vector<bool> inner(ops.size(), false);  // ops of the run whose result stays inside
      for (std::uint32_t m : step.members) inner[m] = m != i;
      std::vector<std::uint32_t> reg(ops.size(), kNone);
      std::vector<std::uint32_t> last_use(ops.size(), 0);
      for (std::uint32_t k = 0; k < step.members.size(); ++k) {
        for (std::uint32_t v : ops[step.members[k]].inputs) {
          if (producer[v] != kNone && inner[producer[v]]) last_use[producer[v]] = k;
        }
      }
      std::uint32_t home = ops[i].inputs[0];
      while (producer[home] != kNone && inner[producer[home]]) home = ops[producer[home]].inputs[0];
      step.externals.push_back(home);
      std::vector<std::uint32_t> free_regs;
      std::string names;
      for (std::uint32_t k = 0; k < step.members.size(); ++k) {
        const RecordedOp& m = ops[step.members[k]];
        FusedInstr ins;
        ins.fn = m.elementwise.fn;
        ins.scalar = m.elementwise.scalar;
        auto operand = [&](std::uint32_t v) {
          const std::uint32_t p = producer[v];
          if (p != kNone && reg[p] != kNone) return FusedOperand{false, reg[p]};
          const auto at = std::find(step.externals.begin(), step.externals.end(), v);
          if (at == step.externals.end()) step.externals.push_back(v);
          return FusedOperand{true, static_cast<std::uint32_t>(
                                        std::find(step.externals.begin(), step.externals.end(), v) -
                                        step.externals.begin())};
        };
        ins.a = operand(m.inputs[0]);
        ins.binary = m.inputs.size() == 2;
        if (ins.binary) ins.b = operand(m.inputs[1]);
        // Registers whose last reader is this op may be reused for its result.
        for (std::uint32_t v : m.inputs) {
          const std::uint32_t p = producer[v];
          if (p != kNone && reg[p] != kNone && last_use[p] == k) {
            free_regs.push_back(reg[p]);
            reg[p] = kNone;
          }
        }
        if (k + 1 < step.members.size()) {
          if (free_regs.empty()) free_regs.push_back(program->registers++);
          ins.out = free_regs.back();
          free_regs.pop_back();
          reg[step.members[k]] = ins.out;
        }
        program->instrs.push_back(ins);
        if (k < 4) names += (k == 0 ? "" : ",") + std::string(m.name);
      }
      if (step.members.size() > 4) names += ",... " + std::to_string(step.members.size()) + " ops";
      program->name = "fused[" + names + "]";
      step.program = std::move(program);
    }
    plan.push_back(std::move(step));
  }
  return plan;
}

}  // namespace ferry::detail
