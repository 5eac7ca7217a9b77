#pragma once
// How a collective goes on a gradient tape: as one group (runtime/tape.hpp) of a node per
// member, whose backward is the transposed collective called once (the cotangent of an
// all-gather is a reduce-scatter, of a reduce-scatter an all-gather, of an all-reduce an
// all-reduce, of an all-to-all the all-to-all back, of a permutation the inverse one), not
// the receives and reductions it is built of: those would carry each member's cotangent back
// by point-to-point copies, each to each. While a collective builds its results the tape is
// hidden, so its inner steps record nothing; then the group is recorded. What each transpose
// is lives in mesh/collective_transposes.hpp, after the collectives it calls.
//
// Every collective of a floating type is grouped: a max or min has the rule of ferry::max over
// the members stacked, and an all-gather of shards of different sizes sums the cotangents whole
// (the reduce-scatter back needs equal parts). Integer and bool collectives have no gradient.
//
// Over processes (a mesh with a transport) it is the same: every process records every
// member's node, a stand-in's as its own (each process runs every device's ops, the others'
// in the model), so every process's tape holds the same groups and its backward walk reaches
// them in the same order with the same members' cotangents present, stand-ins included; each
// then calls the transpose, an ordinary collective that crosses processes. A copy between
// processes outside a collective (distribute's and to_host's receives) goes on the tape as a
// step whose backward throws NotDifferentiable (detail::receive), alike on every process.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/runtime/tape.hpp"

namespace ferry {

namespace detail {

/// The backward of a group of collective results: fills each member input's cotangent.
using GroupBackwardFn = std::function<void(GroupCall&)>;

// The transposes (mesh/collective_transposes.hpp): each a group's rule for the collective
// called with these arguments.
template <Element T>
GroupBackwardFn all_reduce_transpose(const Mesh& mesh, ReduceOp op, int axis);
template <Element T>
GroupBackwardFn all_gather_transpose(const Mesh& mesh, int dim, int axis, bool equal_parts);
template <Element T>
GroupBackwardFn reduce_scatter_transpose(const Mesh& mesh, int dim, ReduceOp op, int axis);
template <Element T>
GroupBackwardFn all_to_all_transpose(const Mesh& mesh, int split_dim, int concat_dim, int axis);
template <Element T>
GroupBackwardFn broadcast_transpose(const Mesh& mesh, std::int64_t from, int axis);
template <Element T>
GroupBackwardFn permute_transpose(const Mesh& mesh,
                                  const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs,
                                  int axis);

/// Whether every shard of `a` has one shape (an all-gather's transpose is a reduce-scatter then).
template <Element T>
bool same_shapes(const MeshArray<T>& a) {
  for (const DeviceArray<T>& s : a.shards()) {
    if (s.shape() != a.shards()[0].shape()) return false;
  }
  return true;
}

/// Set up at a collective's start, once its checks passed: when a gradient tape records this
/// call, hides the tape until record() or the end of the scope, and holds each member's input
/// (the tape's nodes will: no result may take its buffer over).
template <Element T>
class CollectiveTape {
 public:
  explicit CollectiveTape(const MeshArray<T>& a) {
    if constexpr (Floating<T>) {
      Tape* tape = outermost_tape();  // every mesh alike, one over processes too (see the top)
      if (tape == nullptr) return;
      inputs_.reserve(a.shards().size());
      for (const DeviceArray<T>& s : a.shards())
        inputs_.emplace_back(Ref<Step>::share(ArrayAccess::step(s)));
      tape_ = tape;
      t_tape = nullptr;
    } else {
      static_cast<void>(a);
    }
  }
  CollectiveTape(const CollectiveTape&) = delete;
  CollectiveTape& operator=(const CollectiveTape&) = delete;
  ~CollectiveTape() {
    if (tape_ != nullptr) t_tape = tape_;
  }

  /// `out`, the collective's results along `axis` (-1: the whole mesh), recorded as a group
  /// whose rule `rule()` makes (called only when a tape records); `takes_copies` for the rule
  /// that takes a replicated seed's copies as they are (TapeGroup).
  template <class MakeRule>
  MeshArray<T> record(MeshArray<T> out, int axis, MakeRule&& rule, bool takes_copies = false) {
    if (tape_ == nullptr) return out;
    t_tape = std::exchange(tape_, nullptr);
    std::vector<Step*> ins(inputs_.size());
    std::vector<Step*> outs(inputs_.size());
    for (std::size_t i = 0; i < ins.size(); ++i) {
      ins[i] = inputs_[i].get();
      Step* o = ArrayAccess::step(out.shard(static_cast<std::int64_t>(i)));
      outs[i] = o == ins[i] ? nullptr : o;  // a member that keeps its own shard
    }
    auto group = std::make_shared<TapeGroup>();
    group->size = ins.size();
    group->backward = rule();
    group->mesh = MeshAccess::handle(out.mesh()).get();
    group->axis = axis;
    group->takes_copies = takes_copies;
    t_tape->record_group(ins, outs, group);
    return out;
  }

 private:
  Tape* tape_ = nullptr;
  std::vector<Handle> inputs_;  // handles: no result takes over an input's buffer
};

}  // namespace detail
}  // namespace ferry
