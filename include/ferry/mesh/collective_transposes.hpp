#pragma once
// Each collective's transpose, the rule of its group on a gradient tape (mesh/collective_tape.hpp):
// the cotangents of the members' results, as one mesh array (zeros where none came), go back
// through one collective. For y = all_reduce(x), sum: every y_k is sum_i x_i, so dx_i is
// sum_k dy_k, an all-reduce (mean: of the mean). For an all-gather along dim d, x_i is part i
// of every y_k: dx_i sums part i of every dy_k, a reduce-scatter along d. For a reduce-scatter,
// x_i reaches part p of y_p for every p: dx_i is every dy_p joined, an all-gather (mean: over
// n). An all-to-all's parts go back by the all-to-all with the dims swapped; a permutation's
// by the inverse pairs, where a member that sent nothing gets no cotangent. A broadcast's root
// gets the sum of the other members' cotangents (its own result is its input). Where only one
// member of each group holds a cotangent (a loss on one device), a sum is that cotangent: it
// is sent, not all-reduced with zeros; and a group none of whose members holds one gives its
// members nothing, so no backward runs on zeros. Where every member holds a copy of one
// cotangent (a loss Replicate along the axis, seeded on each chip that holds it: the walk's
// copies, autodiff/backward.hpp), the all-reduce's inputs are the summands of the value the
// copies are the cotangent of, so each input's cotangent is its own member's copy: nothing is
// sent, and the copies are not summed (that would count the loss once per member). Before
// every other rule the backward pass ends the copies along its axis (group_backward): one
// member keeps each, and the rule sums them as it sums any cotangents. Each is called with the
// tape as it is, so that a tape enclosing the backward (a gradient of a gradient) records it as
// a group too.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/backward.hpp"
#include "ferry/autodiff/support.hpp"
#include "ferry/mesh/collective_support.hpp"
#include "ferry/mesh/collective_tape.hpp"
#include "ferry/mesh/collectives.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/ops/arithmetic.hpp"
#include "ferry/ops/compare.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/slice.hpp"

namespace ferry::detail {

/// The members' cotangents of a group call as one mesh array on `mesh`: zeros of the result's
/// shape (the input's, where the result is the input) where none came.
template <Floating T>
MeshArray<T> member_cotangents(const Mesh& mesh, const GroupCall& c) {
  std::vector<DeviceArray<T>> shards;
  shards.reserve(c.inputs.size());
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.cotangents[i]) {
      shards.push_back(ArrayAccess::wrap<T>(c.cotangents[i]));
      continue;
    }
    const Step& s = c.outputs[i] != nullptr ? *c.outputs[i] : *c.inputs[i];
    shards.push_back(zeros<T>(DeviceAccess::wrap(s.device()), s.shape()));
  }
  return MeshArray<T>::from_shards(mesh, std::move(shards));
}

/// Gives member i's input the shard i of `g` (`scale` times it, when not 1), where `gets`
/// (when given) says it has a gradient.
template <Floating T>
void give_members(GroupCall& c, const MeshArray<T>& g, double scale = 1.0,
                  const std::vector<bool>* gets = nullptr) {
  // The backward pass sums cotangents of T with what set_grad taught it: a group may be the
  // first rule to make one (a value that is a collective's result).
  cotangent_sum(dtype_of<T>).store(&add_cotangents_as<T>, std::memory_order_relaxed);
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    if (gets != nullptr && !(*gets)[i]) continue;
    const DeviceArray<T>& shard = g.shard(static_cast<std::int64_t>(i));
    c.grads[i] = handle_of(scale == 1.0 ? shard : shard * scale);
  }
}

/// The number of members of each group of `axis` (-1: the whole mesh).
inline std::int64_t group_size(const Mesh& mesh, int axis) {
  return axis < 0 ? mesh.size() : mesh.shape().sizes()[static_cast<std::size_t>(axis)];
}

/// Where the cotangents of a group call came, along `axis`: `reached[d]` for each device d of
/// the mesh whose group holds at least one, and `only`, the one position along the axis that
/// holds them in every group that holds any (-1 where a group holds two, or two groups hold
/// them at different positions). Every process of a mesh over processes finds the same: its
/// tape holds every member's node, a stand-in's too (mesh/collective_tape.hpp).
struct CotangentHolders {
  std::vector<bool> reached;
  std::int64_t only = -1;
};

inline CotangentHolders cotangent_holders(const Mesh& mesh, const GroupCall& c, int axis,
                                          std::string_view op) {
  CotangentHolders h;
  h.reached.assign(c.inputs.size(), false);
  bool single = true;
  for (const MeshGroup& g : mesh_groups(MeshAccess::state(mesh).spec, axis, op)) {
    std::int64_t holder = -1;
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      if (!c.cotangents[static_cast<std::size_t>(g.members[p])]) continue;
      single = single && holder < 0;
      holder = static_cast<std::int64_t>(p);
    }
    if (holder < 0) continue;
    for (const std::int64_t m : g.members) h.reached[static_cast<std::size_t>(m)] = true;
    single = single && (h.only < 0 || h.only == holder);
    h.only = holder;
  }
  if (!single) h.only = -1;
  return h;
}

/// The sum of each group's cotangents on every member of it: each member's own copy where the
/// members hold copies of one cotangent (ending them along `axis`), the one holder's sent where
/// a group has one (a broadcast), an all-reduce otherwise; `h` says which groups hold any.
template <Floating T>
MeshArray<T> group_cotangent_sum(const Mesh& mesh, GroupCall& c, const CotangentHolders& h,
                                 int axis) {
  const MeshArray<T> dy = member_cotangents<T>(mesh, c);
  if (c.copies != nullptr) {
    c.copies->end(axis);
    return dy;
  }
  return h.only >= 0 ? ferry::broadcast(dy, h.only, axis)
                     : ferry::all_reduce(dy, ReduceOp::sum, axis);
}

/// Each member's result of a group call (its input, where the result is the input).
template <Floating T>
MeshArray<T> member_results(const Mesh& mesh, const GroupCall& c) {
  std::vector<DeviceArray<T>> shards;
  shards.reserve(c.inputs.size());
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    shards.push_back(as_array<T>(c.outputs[i] != nullptr ? c.outputs[i] : c.inputs[i]));
  return MeshArray<T>::from_shards(mesh, std::move(shards));
}

/// The rule of a max (min) over the members along `axis`, given on each member the whole
/// extreme `y` and the sum `total` of the cotangents of its parts: ferry::max's rule over the
/// members stacked (autodiff/reduce_rules.hpp), so x_i's cotangent is `total` where x_i is the
/// extreme, shared equally among the members tied there (their count: one more all-reduce).
/// No member reads another's input, so it runs over processes as in one. `gets` as
/// give_members takes it.
template <Floating T>
void extreme_backward(const Mesh& mesh, GroupCall& c, int axis, const MeshArray<T>& y,
                      const MeshArray<T>& total, const std::vector<bool>* gets) {
  std::vector<DeviceArray<bool>> at(c.inputs.size());
  std::vector<DeviceArray<T>> tied(c.inputs.size());
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    at[i] = equal(as_array<T>(c.inputs[i]), y.shard(static_cast<std::int64_t>(i)));
    tied[i] = at[i].template astype<T>();
  }
  const MeshArray<T> ties = ferry::all_reduce(MeshArray<T>::from_shards(mesh, std::move(tied)),
                                              ReduceOp::sum, axis);
  std::vector<DeviceArray<T>> dx(c.inputs.size());
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    dx[i] = where(at[i], total.shard(k) / ties.shard(k), T(0));
  }
  give_members<T>(c, MeshArray<T>::from_shards(mesh, std::move(dx)), 1.0, gets);
}

template <Element T>
GroupBackwardFn all_reduce_transpose(const Mesh& mesh, ReduceOp op, int axis) {
  if constexpr (Floating<T>) {
    if (op == ReduceOp::max || op == ReduceOp::min) {
      return [mesh, axis](GroupCall& c) {
        const CotangentHolders h = cotangent_holders(mesh, c, axis, "all_reduce");
        const bool copies = c.copies != nullptr;
        const MeshArray<T> total = group_cotangent_sum<T>(mesh, c, h, axis);
        extreme_backward<T>(mesh, c, axis, member_results<T>(mesh, c), total,
                            copies ? nullptr : &h.reached);
      };
    }
    const double scale =
        op == ReduceOp::mean ? 1.0 / static_cast<double>(group_size(mesh, axis)) : 1.0;
    return [mesh, op, axis, scale](GroupCall& c) {
      if (c.copies != nullptr) {
        // Every member holds a copy of the one cotangent of the replicated result, whose
        // summands the inputs are: each input's cotangent is its own member's copy (times 1/n
        // for a mean), with nothing sent. Summing the copies would count the loss n times.
        // The inputs are summands, so the copies end here (for the other cotangents too).
        give_members<T>(c, member_cotangents<T>(mesh, c), scale);
        c.copies->end(axis);
        return;
      }
      const CotangentHolders h = cotangent_holders(mesh, c, axis, "all_reduce");
      const MeshArray<T> dy = member_cotangents<T>(mesh, c);
      if (h.only < 0) {
        give_members<T>(c, ferry::all_reduce(dy, op, axis), 1.0, &h.reached);
        return;
      }
      // Each group's sum is its one cotangent: a broadcast from there carries it in a
      // fraction of an all-reduce's messages (a ring all-reduce sends 2 (n - 1) parts).
      give_members<T>(c, ferry::broadcast(dy, h.only, axis), scale, &h.reached);
    };
  } else {
    static_cast<void>(mesh), static_cast<void>(op), static_cast<void>(axis);
    return {};
  }
}

template <Element T>
GroupBackwardFn broadcast_transpose(const Mesh& mesh, std::int64_t from, int axis) {
  if constexpr (Floating<T>) {
    // Only the root's input reaches the results. Its own result is that input, whose
    // cotangent is the input's already: it gets the other members' cotangents, summed.
    std::vector<bool> roots(static_cast<std::size_t>(mesh.size()), false);
    for (const MeshGroup& g : mesh_groups(MeshAccess::state(mesh).spec, axis, "broadcast"))
      roots[static_cast<std::size_t>(g.members[static_cast<std::size_t>(from)])] = true;
    return [mesh, from, axis, roots = std::move(roots)](GroupCall& c) {
      const CotangentHolders h = cotangent_holders(mesh, c, axis, "broadcast");
      std::vector<bool> gets(roots.size());
      for (std::size_t i = 0; i < gets.size(); ++i) gets[i] = roots[i] && h.reached[i];
      const MeshArray<T> dy = member_cotangents<T>(mesh, c);  // zeros at the root
      // One other member holds a cotangent in each group: it goes to the root, one message.
      give_members<T>(c,
                      h.only >= 0 ? ferry::permute(dy, {{h.only, from}}, axis)
                                  : ferry::all_reduce(dy, ReduceOp::sum, axis),
                      1.0, &gets);
    };
  } else {
    static_cast<void>(mesh), static_cast<void>(from), static_cast<void>(axis);
    return {};
  }
}

template <Element T>
GroupBackwardFn all_gather_transpose(const Mesh& mesh, int dim, int axis, bool equal_parts) {
  if constexpr (Floating<T>) {
    if (!equal_parts) {
      // Shards of different sizes along dim: x_i is the block of every y_k at the sizes of the
      // members before it; a reduce-scatter needs equal parts, so the members' cotangents are
      // summed whole (sent, where one member holds them) and each member keeps its block.
      return [mesh, dim, axis](GroupCall& c) {
        const CotangentHolders h = cotangent_holders(mesh, c, axis, "all_gather");
        const MeshArray<T> total = group_cotangent_sum<T>(mesh, c, h, axis);
        std::vector<DeviceArray<T>> dx(c.inputs.size());
        for (const MeshGroup& g : mesh_groups(MeshAccess::state(mesh).spec, axis, "all_gather")) {
          SymInt at = 0;  // symbolic in a traced program, as the shards' sizes are
          for (const std::int64_t m : g.members) {
            const auto i = static_cast<std::size_t>(m);
            const SymInt size = c.inputs[i]->shape()[static_cast<std::size_t>(dim)];
            dx[i] = slice(total.shard(m), dim, at, at + size);
            at = at + size;
          }
        }
        give_members<T>(c, MeshArray<T>::from_shards(mesh, std::move(dx)), 1.0, &h.reached);
      };
    }
    return [mesh, dim, axis](GroupCall& c) {
      give_members<T>(
          c, ferry::reduce_scatter(member_cotangents<T>(mesh, c), dim, ReduceOp::sum, axis));
    };
  } else {
    static_cast<void>(mesh), static_cast<void>(dim), static_cast<void>(axis),
        static_cast<void>(equal_parts);
    return {};
  }
}

template <Element T>
GroupBackwardFn reduce_scatter_transpose(const Mesh& mesh, int dim, ReduceOp op, int axis) {
  if constexpr (Floating<T>) {
    const double scale =
        op == ReduceOp::mean ? 1.0 / static_cast<double>(group_size(mesh, axis)) : 1.0;
    if (op == ReduceOp::max || op == ReduceOp::min) {
      // Member p holds part p of the extreme: every member needs all of it and all of its
      // parts' cotangents, two all-gathers.
      return [mesh, dim, axis](GroupCall& c) {
        extreme_backward<T>(mesh, c, axis, ferry::all_gather(member_results<T>(mesh, c), dim, axis),
                            ferry::all_gather(member_cotangents<T>(mesh, c), dim, axis), nullptr);
      };
    }
    return [mesh, dim, axis, scale](GroupCall& c) {
      give_members<T>(c, ferry::all_gather(member_cotangents<T>(mesh, c), dim, axis), scale);
    };
  } else {
    static_cast<void>(mesh), static_cast<void>(dim), static_cast<void>(op),
        static_cast<void>(axis);
    return {};
  }
}

template <Element T>
GroupBackwardFn all_to_all_transpose(const Mesh& mesh, int split_dim, int concat_dim, int axis) {
  if constexpr (Floating<T>) {
    return [mesh, split_dim, concat_dim, axis](GroupCall& c) {
      give_members<T>(
          c, ferry::all_to_all(member_cotangents<T>(mesh, c), concat_dim, split_dim, axis));
    };
  } else {
    static_cast<void>(mesh), static_cast<void>(split_dim), static_cast<void>(concat_dim),
        static_cast<void>(axis);
    return {};
  }
}

template <Element T>
GroupBackwardFn permute_transpose(const Mesh& mesh,
                                  const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs,
                                  int axis) {
  if constexpr (Floating<T>) {
    // The pairs back, but for one that keeps a shard where it is: that member's result is its
    // input, whose cotangent is there already.
    std::vector<std::pair<std::int64_t, std::int64_t>> back;
    std::vector<bool> sends(static_cast<std::size_t>(group_size(mesh, axis)), false);
    for (const auto& [s, t] : pairs) {
      if (s == t) continue;
      back.emplace_back(t, s);
      sends[static_cast<std::size_t>(s)] = true;
    }
    // Which devices of the mesh sent something: each group's members at those positions.
    std::vector<bool> gets(static_cast<std::size_t>(mesh.size()), false);
    for (const MeshGroup& g : mesh_groups(MeshAccess::state(mesh).spec, axis, "permute")) {
      for (std::size_t p = 0; p < g.members.size(); ++p)
        gets[static_cast<std::size_t>(g.members[p])] = sends[p];
    }
    return [mesh, back = std::move(back), gets = std::move(gets), axis](GroupCall& c) {
      give_members<T>(c, ferry::permute(member_cotangents<T>(mesh, c), back, axis), 1.0, &gets);
    };
  } else {
    static_cast<void>(mesh), static_cast<void>(pairs), static_cast<void>(axis);
    return {};
  }
}

}  // namespace ferry::detail
