#pragma once
// The collectives on mesh arrays: all_reduce, all_gather, reduce_scatter, all_to_all,
// broadcast and permute. Each returns at once, a MeshArray of futures.
//
// How one runs: each member's input is settled on its device's model (when can its data leave:
// once ready and its host has made the call), the collective's plan (model/collective_plan.hpp)
// runs over the mesh's links from those times (model/link_model.hpp), and each member receives
// the data it needs from the others as steps of its own device that complete when the plan says
// its last message arrives.
// What the member then computes (a concatenation, a reduction over the members' data in group
// order) runs on its device as ordinary steps: reductions use the device's compute units and DRAM,
// beside its other kernels. A concatenation (or all_reduce's join) is charged the copy of the
// member's own part only: a real library's links write the others' parts in place. On a ring or
// line a reduce-scatter's member reduces step by step as its data arrives, as a ring does (one
// model command per step: partial_reductions in mesh/member_reduction.hpp), the last being the one
// fold that computes the values. A reduction equals ferry::sum (max, min, mean) over a new leading
// axis of the members' data in group order, bit for bit, on every executor and thread count. A
// failed input reaches exactly the results that needed it. Under a gradient tape each goes back as
// its transpose, one collective (mesh/collective_tape.hpp).
//
// Each takes its operand by value: `all_reduce(std::move(grads))` gives the shards away, so each
// input buffer is freed as soon as the collective has read it, and all_reduce writes each member's
// result into that member's input buffer (donation: the device holds its input and its part of the
// reduction, what it receives passing through), as broadcast and permute do, whose results have
// their members' shapes (mesh/collective_donation.hpp); `all_reduce(grads)` copies handles only and
// leaves `grads` as it was.
//
// What the six share (the groups of a mesh axis, putting a plan on the links, the receives
// and the per-member loop) is in mesh/collective_support.hpp, ReduceOp and how the members'
// data is reduced in mesh/member_reduction.hpp, all_reduce's data path (a reduce-scatter then
// an all-gather, or one-shot) in mesh/all_reduce_parts.hpp; here are each one's checks, plan
// and per-member result.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/config.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/all_reduce_parts.hpp"
#include "ferry/mesh/collective_donation.hpp"
#include "ferry/mesh/collective_support.hpp"
#include "ferry/mesh/collective_tape.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/member_reduction.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/ops/stack.hpp"

namespace ferry {

/// The reduction of every member's shard along mesh axis `axis` (-1: the whole mesh), on every
/// member: ferry::sum (max, min, mean) over a new leading axis of the shards in group order.
/// Throws, at the call: InvalidArgument for an empty array, an axis the mesh lacks, mean of
/// integers, bool arrays; ShapeError when two members' shards differ in shape (naming both
/// devices).
template <Numeric T>
MeshArray<T> all_reduce(MeshArray<T> a, ReduceOp op = ReduceOp::sum, int axis = -1) {
  constexpr std::string_view name = "all_reduce";
  detail::MeshState& mesh = detail::operand(name, a);
  detail::check_reducible<T>(name, op);
  const auto& groups = mesh.groups_of(axis, name);
  for (const auto& g : groups) detail::check_same_shapes(name, a, g);
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(
        std::string(name) + "(" + std::string(detail::reduce_op_name(op)) + ")", a, axis);
  });
  detail::CollectiveTape<T> tape(a);
  const Mesh on = a.mesh();
  auto out = detail::all_reduce_members(name, mesh, std::move(a), groups, op);
  // The one rule that takes a replicated seed's copies (mesh/collective_transposes.hpp).
  return tape.record(MeshArray<T>::from_shards(on, std::move(out)), axis,
                     [&] { return detail::all_reduce_transpose<T>(on, op, axis); }, true);
}

/// Every member's shard along mesh axis `axis` (-1: the whole mesh), concatenated along `dim`
/// in group order, on every member. Shards may differ in size along `dim` only. Throws, at the
/// call: InvalidArgument for an empty array, a `dim` or axis out of range; ShapeError when two
/// members' shards differ elsewhere (naming both devices).
template <Element T>
MeshArray<T> all_gather(MeshArray<T> a, int dim = 0, int axis = -1) {
  constexpr std::string_view name = "all_gather";
  detail::MeshState& mesh = detail::operand(name, a);
  const int d = detail::normalize_mesh_dim(name, "dim", dim, detail::shards_rank(name, a));
  const auto& groups = mesh.groups_of(axis, name);
  for (const auto& g : groups) detail::check_same_shapes(name, a, g, d);
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(dim " + std::to_string(d) + ")", a,
                                          axis);
  });
  const bool equal = detail::same_shapes(a);
  detail::CollectiveTape<T> tape(a);
  return tape.record(detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        std::vector<const DeviceArray<T>*> inputs;
        std::int64_t bytes = 0;
        for (std::int64_t m : g.members) {
          inputs.push_back(&a.shard(m));
          bytes += detail::bytes_of_shard(a.shard(m));
        }
        const CollectivePlan plan = plan_all_gather(
            g.topology, static_cast<std::int64_t>(g.members.size()), bytes, mesh.spec.link);
        return detail::place_on_links(mesh, plan, g, inputs, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, const detail::Placed& placed) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        // Equal shards: the others' in one receive, concatenated with its own where they lie.
        if (equal && detail::batches(a, g)) {
          return detail::concat_members(
              name,
              detail::receive_members(name, a, g, p, -1, here, placed.arrivals[p],
                                      placed.verdicts, true, true),
              d);
        }
        const detail::MemberData<T> data = detail::receive_members(
            name, a, g, p, -1, here, placed.arrivals[p], placed.verdicts, false, true);
        if (data.arrays.size() == 1) return data.arrays[0];
        return detail::concat(
            name, std::vector<DeviceArray<T>>(data.arrays.begin(), data.arrays.end()), d, p);
      }), axis, [&] { return detail::all_gather_transpose<T>(a.mesh(), d, axis, equal); });
}

/// The reduction of every member's shard along mesh axis `axis`, cut along `dim` into as many
/// equal parts as members: position p keeps the p-th part of the reduction. Throws like
/// all_reduce, and InvalidArgument when `dim`'s size does not divide by the group's size.
template <Numeric T>
MeshArray<T> reduce_scatter(MeshArray<T> a, int dim = 0, ReduceOp op = ReduceOp::sum,
                            int axis = -1) {
  constexpr std::string_view name = "reduce_scatter";
  detail::MeshState& mesh = detail::operand(name, a);
  detail::check_reducible<T>(name, op);
  const int d = detail::normalize_mesh_dim(name, "dim", dim, detail::shards_rank(name, a));
  const auto& groups = mesh.groups_of(axis, name);
  for (const auto& g : groups) {
    detail::check_same_shapes(name, a, g);
    detail::part_size(name, a, g, d);
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(dim " + std::to_string(d) + ", " +
                                              std::string(detail::reduce_op_name(op)) + ")",
                                          a, axis);
  });
  detail::CollectiveTape<T> tape(a);
  bool batched = false;  // the group at hand's batches(), asked once as it is placed
  return tape.record(detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        batched = detail::batches(a, g);
        return detail::place_by_shard(mesh, a, g, Collective::reduce_scatter, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, const detail::Placed& placed) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        // Reduced step by step (a ring, a line): its parts stream through, holding no memory.
        const auto steps = placed.reductions_of(p);
        return detail::reduce_received(name,
                                       detail::receive_members(name, a, g, p, d, here,
                                                               placed.arrivals[p],
                                                               placed.verdicts, batched,
                                                               !steps.empty()),
                                       op, -1, steps);
      }), axis, [&] { return detail::reduce_scatter_transpose<T>(a.mesh(), d, op, axis); });
}

/// Each member's shard along mesh axis `axis` cut along `split_dim` into as many equal parts
/// as members; position p receives the p-th part of every member's shard, concatenated along
/// `concat_dim` in group order (JAX's all_to_all). Throws InvalidArgument for an empty array,
/// a dim or axis out of range, a `split_dim` whose size does not divide by the group's size;
/// ShapeError when two members' shards differ in shape.
template <Element T>
MeshArray<T> all_to_all(MeshArray<T> a, int split_dim, int concat_dim, int axis = -1) {
  constexpr std::string_view name = "all_to_all";
  detail::MeshState& mesh = detail::operand(name, a);
  const std::size_t rank = detail::shards_rank(name, a);
  const int split = detail::normalize_mesh_dim(name, "split_dim", split_dim, rank);
  const int cat = detail::normalize_mesh_dim(name, "concat_dim", concat_dim, rank);
  const auto& groups = mesh.groups_of(axis, name);
  for (const auto& g : groups) {
    detail::check_same_shapes(name, a, g);
    detail::part_size(name, a, g, split);
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(split_dim " +
                                              std::to_string(split) + ", concat_dim " +
                                              std::to_string(cat) + ")",
                                          a, axis);
  });
  detail::CollectiveTape<T> tape(a);
  return tape.record(detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        return detail::place_by_shard(mesh, a, g, Collective::all_to_all, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, const detail::Placed& placed) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        // Parts that are blocks of their shards (views on the other path, no copy kernel on
        // their devices): the others' in one receive, concatenated with its own where they lie.
        const Shape& shape = a.shard(g.members[p]).shape();
        if (detail::batches(a, g) &&
            detail::axis_view(shape, static_cast<std::size_t>(split)).outer == 1) {
          return detail::concat_members(
              name,
              detail::receive_members(name, a, g, p, split, here, placed.arrivals[p],
                                      placed.verdicts, true, true),
              cat);
        }
        const auto parts =
            detail::receive_parts(name, a, g, p, split, here, placed.arrivals[p], true);
        return parts.size() == 1 ? parts[0] : detail::concat(name, parts, cat, p);
      }), axis, [&] { return detail::all_to_all_transpose<T>(a.mesh(), split, cat, axis); });
}

/// Every member along mesh axis `axis` receives the shard of position `from` along it.
/// Throws InvalidArgument for an empty array, an axis the mesh lacks, `from` outside the group.
template <Element T>
MeshArray<T> broadcast(MeshArray<T> a, std::int64_t from, int axis = -1) {
  constexpr std::string_view name = "broadcast";
  detail::MeshState& mesh = detail::operand(name, a);
  const auto& groups = mesh.groups_of(axis, name);
  const auto n = static_cast<std::int64_t>(groups[0].members.size());
  if (from < 0 || from >= n) {
    detail::fail<InvalidArgument>(name, "from ", from, " is not a position of a group of ", n,
                                  " members");
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(from " + std::to_string(from) + ")",
                                          a, axis);
  });
  const bool donate = detail::moves_donate();  // asked before the tape is hidden
  detail::CollectiveTape<T> tape(a);
  const Mesh on = a.mesh();
  const auto root = static_cast<std::size_t>(from);
  auto place = [&](const detail::MeshGroup& g) {
    const auto inputs = detail::inputs_of(a, g);
    const std::int64_t bytes = detail::bytes_of_shard(*inputs[root]);
    const CollectivePlan plan =
        plan_broadcast(g.topology, n, bytes, g.path_position(from), mesh.spec.link);
    return detail::place_on_links(mesh, plan, g, inputs, name);
  };
  auto make = [&](const detail::MeshGroup& g, std::size_t p, const detail::Placed& placed) {
    return detail::receive(name, a.shard(g.members[root]),
                           mesh.devices[static_cast<std::size_t>(g.members[p])],
                           placed.arrivals[p], &placed.verdicts[root]);
  };
  auto transpose = [&] { return detail::broadcast_transpose<T>(on, from, axis); };
  if (!donate) return tape.record(detail::per_member(a, groups, place, make), axis, transpose);
  // The root keeps its shard; every other member's shard is read by nobody, so it takes the
  // root's data as it arrives.
  const std::vector<detail::MemberMove> moves(static_cast<std::size_t>(n), {from, -1});
  return tape.record(detail::move_members(name, a, groups, moves, place, make), axis,
                     transpose);
}

/// Each {source, target} pair of positions along mesh axis `axis` sends the source's shard to
/// the target; a member no pair targets gets zeros of its own shard's shape (JAX's ppermute).
/// A ring shift is {{0, 1}, {1, 2}, ..., {n-1, 0}}. Throws InvalidArgument for an empty array,
/// an axis the mesh lacks, a position outside the group, two pairs with one source or one
/// target (naming both); ShapeError when a source's shard differs in shape from its target's.
template <Element T>
MeshArray<T> permute(MeshArray<T> a,
                     const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs,
                     int axis = -1) {
  constexpr std::string_view name = "permute";
  detail::MeshState& mesh = detail::operand(name, a);
  const auto& groups = mesh.groups_of(axis, name);
  const auto n = static_cast<std::int64_t>(groups[0].members.size());
  std::vector<std::int64_t> source_of(static_cast<std::size_t>(n), -1);
  std::vector<bool> sends(static_cast<std::size_t>(n), false);
  for (const auto& [s, t] : pairs) {
    if (s < 0 || s >= n || t < 0 || t >= n) {
      detail::fail<InvalidArgument>(name, "pair {", s, ", ", t,
                                    "} names a position outside a group of ", n, " members");
    }
    if (sends[static_cast<std::size_t>(s)])
      detail::fail<InvalidArgument>(name, "two pairs have source ", s);
    if (source_of[static_cast<std::size_t>(t)] >= 0) {
      detail::fail<InvalidArgument>(name, "pairs {", source_of[static_cast<std::size_t>(t)], ", ",
                                    t, "} and {", s, ", ", t, "} have one target");
    }
    sends[static_cast<std::size_t>(s)] = true;
    source_of[static_cast<std::size_t>(t)] = s;
  }
  for (const auto& g : groups) {
    for (const auto& [s, t] : pairs) {
      const DeviceArray<T>& from = a.shard(g.members[static_cast<std::size_t>(s)]);
      const DeviceArray<T>& to = a.shard(g.members[static_cast<std::size_t>(t)]);
      if (from.shape() != to.shape()) {
        detail::fail<ShapeError>(name, "pair {", s, ", ", t, "} sends ", from.shape().to_string(),
                                 " from ", from.device().name(), " in place of ",
                                 to.shape().to_string(), " on ", to.device().name());
      }
    }
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(detail::permute_text(pairs), a, axis);
  });
  const bool donate = detail::moves_donate();  // asked before the tape is hidden
  detail::CollectiveTape<T> tape(a);
  const Mesh on = a.mesh();
  auto place = [&](const detail::MeshGroup& g) {
    const auto inputs = detail::inputs_of(a, g);
    std::vector<std::pair<std::int64_t, std::int64_t>> on_path;  // the plan's positions
    for (const auto& [s, t] : pairs) on_path.emplace_back(g.path_position(s), g.path_position(t));
    const CollectivePlan plan = plan_permute(g.topology, n, detail::bytes_of_shard(*inputs[0]),
                                             on_path, mesh.spec.link);
    return detail::place_on_links(mesh, plan, g, inputs, name);
  };
  auto make = [&](const detail::MeshGroup& g, std::size_t p, const detail::Placed& placed) {
    const DeviceArray<T>& own = a.shard(g.members[p]);
    const std::int64_t s = source_of[p];
    if (s < 0) return ferry::zeros<T>(own.device(), own.shape());
    const auto source = static_cast<std::size_t>(s);
    return detail::receive(name, a.shard(g.members[source]), own.device(), placed.arrivals[p],
                           &placed.verdicts[source]);
  };
  auto transpose = [&] { return detail::permute_transpose<T>(on, pairs, axis); };
  if (!donate) return tape.record(detail::per_member(a, groups, place, make), axis, transpose);
  std::vector<detail::MemberMove> moves(static_cast<std::size_t>(n));
  for (const auto& [s, t] : pairs) {
    moves[static_cast<std::size_t>(t)].from = s;
    moves[static_cast<std::size_t>(s)].to = t;
  }
  return tape.record(detail::move_members(name, a, groups, moves, place, make), axis,
                     transpose);
}

}  // namespace ferry

// Each collective's transpose, which calls the collectives above.
#include "ferry/mesh/collective_transposes.hpp"  // IWYU pragma: keep

namespace ferry {
// Compiled once in the separate mode: nn::DataParallel calls it (see FERRY_EXTERN_TEMPLATE).
FERRY_EXTERN_TEMPLATE(MeshArray<float> broadcast<float>(MeshArray<float>, std::int64_t, int))
}  // namespace ferry
