#pragma once
// The backward pass: the nodes a tape recorded, walked from last to first, each node's rule
// turning its output's cotangent into its inputs', summed where an array feeds several ops.
// Every rule submits ops and returns at once, so the whole pass is a graph like any other: it
// runs while the host goes on, and only an export of a gradient waits.
//
// A group (a collective's members, runtime/tape.hpp) goes back at once: the walk meets its
// last member first, and by then every cotangent of every member is complete (whatever read a
// member's output was recorded after the whole group), so that member's visit takes them all
// to the group's rule and the others are passed over.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry::detail {

/// Seeds that are copies of one value: a loss placed Replicate along mesh axes, its cotangent
/// seeded on every device that holds a copy (a mesh loss: mesh/mesh_gradients.hpp). `first(s, a)`
/// says whether step s's device stands at position 0 of its group along axis a (true for a
/// device outside the mesh).
struct CopySeeds {
  const void* mesh = nullptr;  // the mesh's state: whose axes `axes` names
  std::vector<int> axes;
  std::function<bool(const Step&, int)> first;
};

/// The backward walk's copies. Along each of its axes, every cotangent in flight is a copy: each
/// member of a group holds the whole cotangent of one value (not a summand of it), equal on
/// every member, as long as the devices do alike between the seeds and here (what a Replicate
/// placement promises; the mesh ops keep it). A copy is worth carrying only to the all-reduce
/// that made the replicated value: each member's input gets its own copy, and the transpose
/// sends nothing (mesh/collective_transposes.hpp). Anywhere else the copies end: along the
/// axis, the member at position 0 keeps its cotangent and the others drop theirs, which makes
/// the copies ordinary summands that sum to the one cotangent (the loss counted once), exact in
/// any precision, with no op run.
class CopyWalk {
 public:
  CopyWalk(CopySeeds seeds, std::unordered_map<const Step*, Handle>& cotangents)
      : seeds_(std::move(seeds)), cotangents_(cotangents) {}

  bool active() const noexcept { return !seeds_.axes.empty(); }
  const void* mesh() const noexcept { return seeds_.mesh; }
  const std::vector<int>& axes() const noexcept { return seeds_.axes; }
  bool along(int axis) const {
    for (const int a : seeds_.axes) {
      if (a == axis) return true;
    }
    return false;
  }
  /// Whether `s`'s device keeps its copy when the copies along `axis` end.
  bool first(const Step& s, int axis) const { return seeds_.first(s, axis); }

  /// Whether each of a group's `cotangents` (every member holds one) is a copy along `axis` of
  /// `mesh` (a mesh's state).
  bool all_copies(const void* mesh, int axis, std::span<const Handle> cotangents) const {
    if (axis < 0 || mesh != seeds_.mesh || !along(axis)) return false;
    for (const Handle& h : cotangents) {
      if (!h) return false;
    }
    return true;
  }

  /// Ends the copies that a group along `axis` of `mesh` would otherwise sum: along `axis`
  /// (along every axis for -1, or for a group of another mesh), the group's `cotangents` (of
  /// its members' `inputs`) and those in flight keep a copy at position 0 only, summands from
  /// here on.
  void settle(const void* mesh, int axis, std::span<Step* const> inputs,
              std::span<Handle> cotangents) {
    const bool same = mesh == seeds_.mesh;
    const std::vector<int> axes = seeds_.axes;
    for (const int a : axes) {
      if (same && axis >= 0 && a != axis) continue;
      for (std::size_t i = 0; i < cotangents.size(); ++i) {
        if (cotangents[i] && !first(*inputs[i], a)) cotangents[i] = Handle();
      }
      end(a);
    }
  }

  /// Ends the copies along `axis` (-1: every axis) for the cotangents in flight.
  void end(int axis) {
    std::vector<int> left;
    for (const int a : seeds_.axes) {
      if (axis >= 0 && a != axis) {
        left.push_back(a);
        continue;
      }
      // By the cotangent's step, on its array's device: the array itself may be gone (an input
      // no variable reaches, held by nothing once its reader's node was released).
      std::erase_if(cotangents_, [&](const auto& e) { return !first(*e.second.get(), a); });
    }
    seeds_.axes = std::move(left);
  }

 private:
  CopySeeds seeds_;
  std::unordered_map<const Step*, Handle>& cotangents_;
};

/// a + b for two cotangents of one array.
inline Handle add_cotangents(Handle a, Handle b) {
  const DType t = a.get()->dtype();
  CotangentSum sum = cotangent_sum(t).load(std::memory_order_relaxed);
  if (sum == nullptr) fail<NotDifferentiable>("grad", "a cotangent of element type ", name_of(t));
  return sum(std::move(a), std::move(b));
}

/// Adds `g` to the cotangent of `to` in `cotangents`.
FERRY_DECL void accumulate(std::unordered_map<const Step*, Handle>& cotangents, const Step* to,
                           Handle g);
#if FERRY_DEFINES_DECLS
FERRY_DECL void accumulate(std::unordered_map<const Step*, Handle>& cotangents, const Step* to,
                           Handle g) {
  const auto [at, fresh] = cotangents.try_emplace(to, g);
  if (!fresh) at->second = add_cotangents(std::move(at->second), std::move(g));
}
#endif

/// The backward of the group whose last member is `last` (the group's nodes are the `size`
/// ones from `last` back): its rule gets every member's cotangent, each input its cotangent.
/// With `copies`, the copies along the group's axis end first (CopyWalk::settle), once for
/// every rule, unless the group takes them and every member holds one: then the rule gets
/// them. Releases the members' nodes; returns the iterator at the first member.
template <class It>
It group_backward(It last, std::unordered_map<const Step*, Handle>& cotangents,
                  const std::unordered_set<const Step*>& wanted, CopyWalk* copies) {
  const std::shared_ptr<const TapeGroup> group = last->group;  // the nodes' go below
  const std::size_t n = group->size;
  std::vector<Step*> inputs(n);
  std::vector<Step*> outputs(n);
  std::vector<Handle> cots(n);
  std::vector<Handle> grads(n);
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    TapeNode& member = *(last + static_cast<std::ptrdiff_t>(n - 1 - i));
    inputs[i] = member.inputs[0].get();
    outputs[i] = member.output.get();
    if (outputs[i] == nullptr) continue;
    const auto found = cotangents.find(outputs[i]);
    if (found == cotangents.end()) continue;
    cots[i] = found->second;
    if (!wanted.contains(outputs[i])) cotangents.erase(found);
    any = true;
  }
  if (any) {
    CopyWalk* taken = nullptr;
    if (copies != nullptr) {
      if (group->takes_copies && copies->all_copies(group->mesh, group->axis, cots)) {
        taken = copies;
      } else {
        copies->settle(group->mesh, group->axis, inputs, cots);
      }
    }
    GroupCall call{inputs, outputs, cots, grads, taken};
    group->backward(call);
    for (std::size_t i = 0; i < n; ++i) {
      if (grads[i]) accumulate(cotangents, inputs[i], std::move(grads[i]));
    }
  }
  for (std::size_t i = 0; i < n; ++i) *(last + static_cast<std::ptrdiff_t>(i)) = TapeNode{};
  return last + static_cast<std::ptrdiff_t>(n - 1);
}

/// The cotangents of `wrt` given cotangents `seeds` for `outputs` (one each; an empty seed
/// passes nothing back, and seeds of one array given twice are summed), in `wrt`'s order, an
/// empty handle where no output depends on one. Releases each node's forward values as soon as
/// its rule has used them. With `copies`, the seeds are copies along its axes (CopyWalk): the
/// copies end before a step that moves data between devices, and at the end, so that what comes
/// back is summands, as without. Throws NotDifferentiable naming the op when a cotangent reaches
/// a floating op without a rule (a path through integers or bools contributes zero), and what a
/// rule throws.
FERRY_DECL std::vector<Handle> backward(Tape& tape, std::span<Step* const> outputs,
                                        std::span<Handle> seeds, std::span<Step* const> wrt,
                                        const CopySeeds* copies = nullptr);
#if FERRY_DEFINES_DECLS
FERRY_DECL std::vector<Handle> backward(Tape& tape, std::span<Step* const> outputs,
                                        std::span<Handle> seeds, std::span<Step* const> wrt,
                                        const CopySeeds* copies) {
  std::unordered_map<const Step*, Handle> cotangents;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!seeds[i]) continue;
    // try_emplace leaves the seed alone when the output is already there.
    const auto [at, fresh] = cotangents.try_emplace(outputs[i], std::move(seeds[i]));
    if (!fresh) at->second = add_cotangents(std::move(at->second), std::move(seeds[i]));
  }
  const std::unordered_set<const Step*> wanted(wrt.begin(), wrt.end());
  CopyWalk walk(copies != nullptr ? *copies : CopySeeds{}, cotangents);
  std::vector<Step*> inputs;
  std::vector<Handle> grads;
  std::vector<TapeNode>& nodes = tape.nodes();
  for (auto node = nodes.rbegin(); node != nodes.rend(); ++node) {
    if (node->group) {
      node = group_backward(node, cotangents, wanted, walk.active() ? &walk : nullptr);
      continue;
    }
    Step& out = *node->output.get();
    if (walk.active()) {
      // A copy between devices (a collective recorded step by step) is not alike on every
      // member: the copies end before it.
      for (const Handle& in : node->inputs) {
        if (in.get()->device() != out.device()) walk.end(-1);
      }
    }
    const auto found = cotangents.find(&out);
    if (found == cotangents.end()) continue;
    Handle g = found->second;
    if (!wanted.contains(&out)) cotangents.erase(found);
    if (!node->backward) {
      // An integer or bool output (a comparison, an index) carries no gradient: zero, as in
      // JAX. Only a floating step without a rule (a custom one given none) has no defined one.
      if (!is_floating(out.dtype())) continue;
      fail<NotDifferentiable>(out.info().name, "has no gradient, and the differentiated value "
                                               "depends on it (a custom step takes a backward "
                                               "rule as its last argument)");
    }
    inputs.clear();
    for (const Handle& in : node->inputs) inputs.push_back(in.get());
    grads.assign(inputs.size(), Handle());
    GradCall call{inputs, out, g, grads, &tape};
    node->backward(call);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (grads[i]) accumulate(cotangents, inputs[i], std::move(grads[i]));
    }
    *node = TapeNode{};
  }
  walk.end(-1);  // a replicated variable's copies: summands, as every gradient comes back
  std::vector<Handle> result;
  result.reserve(wrt.size());
  for (Step* v : wrt) {
    const auto found = cotangents.find(v);
    result.push_back(found != cotangents.end() ? found->second : Handle());
  }
  return result;
}
#endif

/// backward from one output: the cotangents of `wrt` given cotangent `seed` for `output`.
/// Throws like the form with several outputs.
inline std::vector<Handle> backward(Tape& tape, Step& output, Handle seed,
                                    std::span<Step* const> wrt) {
  Step* const outputs[] = {&output};
  return backward(tape, outputs, std::span<Handle>(&seed, 1), wrt);
}

}  // namespace ferry::detail
