#pragma once
// The collectives on mesh arrays: all_reduce, all_gather, reduce_scatter, all_to_all,
// broadcast and permute. Each returns at once, a MeshArray of futures.
//
// How one runs: each member's input is settled on its device's model (when would its data be
// ready), the collective's plan (model/collective_plan.hpp) runs over the mesh's links from
// those times (model/link_model.hpp), and each member receives the data it needs from the
// others as steps of its own device that complete when the plan says its last message arrives.
// What the member then computes (a concatenation, a reduction over the members' data stacked
// in group order) runs on its device as ordinary ops: reductions use the device's compute
// units and DRAM, beside its other kernels. Values are therefore those of the ops: a
// reduction equals ferry::sum (max, min, mean) over a new leading axis of the members' data in
// group order, on every executor and thread count. A failed input reaches exactly the results
// that needed it, and gradients flow through the transfers and ops like through any others.
//
// Each takes its operand by value: `all_reduce(std::move(grads))` gives the shards away, so
// each input buffer is freed as soon as the collective has read it (donation), while
// `all_reduce(grads)` copies handles only and leaves `grads` as it was.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/ops/stack.hpp"

namespace ferry {

/// How all_reduce and reduce_scatter combine the members' data.
enum class ReduceOp : std::uint8_t { sum, max, min, mean };

namespace detail {

/// One group of a collective: the devices (row-major indices) along a mesh axis that share
/// every other coordinate, in the order of their coordinate on that axis; or the whole mesh.
struct MeshGroup {
  std::vector<std::int64_t> members;
  Topology topology = Topology::line;
};

/// The groups of `axis` (-1: the whole mesh as one group, row-major). The whole mesh of a
/// rank-1 mesh is its axis; of a larger mesh, a ring through its devices in row-major order (a
/// line of two) when every axis is a ring or a line, a switch when one axis is: an
/// approximation of the path row-major order takes. Throws InvalidArgument, as `op`, for an
/// axis the mesh does not have.
inline std::vector<MeshGroup> mesh_groups(const MeshSpec& spec, int axis, std::string_view op) {
  const MeshShape& shape = spec.shape;
  const auto n = shape.size();
  if (axis < -1 || axis >= static_cast<int>(shape.rank())) {
    fail<InvalidArgument>(op, "axis ", axis, " is not an axis of mesh ", spec.name, " ",
                          shape.to_string(), " (give 0..", shape.rank() - 1,
                          ", or -1 for the whole mesh)");
  }
  if (axis == -1) {
    MeshGroup g;
    for (std::int64_t i = 0; i < n; ++i) g.members.push_back(i);
    if (shape.rank() == 1) {
      g.topology = spec.topology[0];
    } else {
      bool switched = false;
      for (Topology t : spec.topology) switched = switched || t == Topology::fully_connected;
      g.topology =
          switched ? Topology::fully_connected : (n >= 3 ? Topology::ring : Topology::line);
    }
    return {g};
  }
  const auto a = static_cast<std::size_t>(axis);
  std::vector<MeshGroup> groups;
  for (std::int64_t i = 0; i < n; ++i) {
    const MeshCoordinate c = shape.coordinate_of(i);
    if (c.indices()[a] != 0) continue;  // the first member of each group starts it
    MeshGroup g;
    g.topology = spec.topology[a];
    std::vector<std::int64_t> at = c.indices();
    for (std::int64_t k = 0; k < shape.sizes()[a]; ++k) {
      at[a] = k;
      g.members.push_back(shape.index_of(MeshCoordinate(at)));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

/// The arrival times at each member of a collective whose plan is `plan`, member i's input
/// being `inputs[i]`: the inputs are settled on their devices' models, then the plan runs on
/// the mesh's links.
template <Element T>
std::vector<Duration> place_on_links(MeshState& mesh, const CollectivePlan& plan,
                                     const MeshGroup& group,
                                     const std::vector<const DeviceArray<T>*>& inputs,
                                     std::string_view op) {
  std::vector<Duration> ready;
  ready.reserve(inputs.size());
  for (const DeviceArray<T>* in : inputs) {
    Step& s = step_of(op, *in);
    ready.push_back(s.device()->settle(s).at);
  }
  std::lock_guard lock(mesh.net->mutex);
  return mesh.net->links.run(plan, group.members, ready);
}

constexpr std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::mean: return "mean";
  }
  return "?";
}

/// A copy of `src` onto `dst`, a step of `dst` named `name` whose data arrives at `at` (over
/// links the collective placed) or fails as `src` did. Gradients flow back as through `to`.
/// Inside a collective over processes (RemoteCollective): a copy out of a device this process
/// owns to one it does not is sent to that device's process, a copy into one it owns from one
/// it does not waits for the bytes that process sends, and a copy between two of its own waits
/// until every process is known to make the same call; a device outside the mesh (the host,
/// for to_host) counts as this process's, and receives from every process.
template <Element T>
DeviceArray<T> receive(std::string_view name, const DeviceArray<T>& src, const Device& dst,
                       Duration at) {
  Step& s = step_of(name, src);
  const std::shared_ptr<DeviceState>& to = DeviceAccess::state(dst);
  if (to == s.device()) return src;
  Ref<Step> gate;  // what the copy reads instead of src (remote data), or waits for besides
  bool remote_source = false;
  if (RemoteScope* r = t_remote_scope) {
    RemoteMesh& net = *r->mesh->remote;
    const std::int64_t from_member = r->mesh->member_of(s.device().get());
    const std::int64_t to_member = r->mesh->member_of(to.get());
    const bool here_from = from_member < 0 || net.local(from_member);
    const bool here_to = to_member < 0 || net.local(to_member);
    if (here_from && (!here_to || to_member < 0)) net.send(*r->call, from_member, to_member, s);
    if (!here_from && here_to) {
      gate = net.expect(*r->call, from_member, to_member, s);
      remote_source = true;
    } else if (here_from && here_to) {
      gate = net.verified(*r->call, to);
    }
  }
  Arrival from = s.device()->settle(s);
  from.at = std::max(from.at, at);
  // A stepped executor runs only when an export on its own device drives it (see `to`).
  if (!remote_source && s.executor().thread_count() == 0 && &s.executor() != &to->executor())
    s.executor().wait(s);
  auto copy = [](const Step& st) {
    if (st.output_bytes() != 0)
      std::memcpy(st.out<std::byte>(), st.in<std::byte>(0), st.output_bytes());
  };
  Step* all_inputs[] = {remote_source ? gate.get() : &s, gate.get()};
  const std::span<Step* const> inputs(all_inputs,
                                      gate && !remote_source ? std::size_t{2} : std::size_t{1});
  // Nothing for the receiving device's engine to do: the links carried the bytes, and the
  // data is there when the plan's last message arrives.
  Cost arrives;
  arrives.fixed_duration = Duration::zero();
  auto* t = new KernelStep<decltype(copy)>(
      to, to->executor(), {StepKind::copy_d2d, std::string(name), arrives, s.layout()}, dtype_of<T>,
      s.shape(), inputs, copy);
  Ref<Step> ref = Ref<Step>::adopt(t);
  note_submitted(*t);
  to->submit_transfer(*t, from);
  // Gradients through a collective over processes are not recorded yet (the remote data
  // has no step of its own here to send a cotangent back to).
  Tape* tape = gate ? nullptr : outermost_tape();
  if (tape != nullptr) {
    record_grad<T>(*tape, inputs, *t, [](auto tag, GradCall& c) { transfer_backward(tag, c); });
  }
  return ArrayAccess::wrap<T>(std::move(ref));
}

/// Checks `a` for a collective: a valid mesh array; returns its mesh's state.
template <Element T>
MeshState& operand(std::string_view op, const MeshArray<T>& a) {
  if (!a.valid()) fail<InvalidArgument>(op, "empty mesh array");
  return MeshAccess::state(a.mesh());
}

/// Throws ShapeError, as `op`, unless every member's shard has the shape of the first, or
/// (with `except` >= 0) the same shape but along that dimension.
template <Element T>
void check_same_shapes(std::string_view op, const MeshArray<T>& a, const MeshGroup& g,
                       int except = -1) {
  const DeviceArray<T>& first = a.shard(g.members[0]);
  for (std::size_t i = 1; i < g.members.size(); ++i) {
    const DeviceArray<T>& other = a.shard(g.members[i]);
    bool same = other.shape().rank() == first.shape().rank();
    for (std::size_t d = 0; same && d < first.shape().rank(); ++d) {
      same = static_cast<int>(d) == except || other.shape().dims()[d] == first.shape().dims()[d];
    }
    if (!same) {
      fail<ShapeError>(op, "shards differ",
                       except >= 0 ? " outside dim " + std::to_string(except) : std::string(), ": ",
                       first.shape().to_string(), " on ", first.device().name(), ", ",
                       other.shape().to_string(), " on ", other.device().name());
    }
  }
}

/// `dim` (negative counts from the end) as an index into a rank-`rank` shape; InvalidArgument
/// naming `what` when out of range.
inline int normalize_mesh_dim(std::string_view op, std::string_view what, int dim,
                              std::size_t rank) {
  const int r = static_cast<int>(rank);
  if (dim < -r || dim >= r)
    fail<InvalidArgument>(op, what, " ", dim, " is out of range for rank ", rank);
  return dim < 0 ? dim + r : dim;
}

/// `dim`'s size of shard `g.members[0]`, checked to divide by the group's size.
template <Element T>
std::int64_t part_size(std::string_view op, const MeshArray<T>& a, const MeshGroup& g, int dim) {
  const Shape& shape = a.shard(g.members[0]).shape();
  const std::int64_t size = shape.dims()[static_cast<std::size_t>(dim)];
  const auto n = static_cast<std::int64_t>(g.members.size());
  if (size % n != 0) {
    fail<InvalidArgument>(op, "dim ", dim, " of ", shape.to_string(), " has size ", size,
                          ", which does not divide into ", n, " parts, one per member");
  }
  return size / n;
}

template <Element T>
std::int64_t bytes_of_shard(const DeviceArray<T>& a) {
  return a.shape().numel() * static_cast<std::int64_t>(sizeof(T));
}

/// The reduction of `parts` (one per member, in group order) over a new leading axis.
template <Element T>
DeviceArray<T> reduce_members(std::string_view op, const std::vector<DeviceArray<T>>& parts,
                              ReduceOp how) {
  const DeviceArray<T> stacked = ferry::stack(parts, 0);
  switch (how) {
    case ReduceOp::sum:
      return ferry::sum(stacked, {0});
    case ReduceOp::max:
      return ferry::max(stacked, {0});
    case ReduceOp::min:
      return ferry::min(stacked, {0});
    case ReduceOp::mean:
      if constexpr (Floating<T>) {
        return ferry::mean(stacked, {0});
      } else {
        fail<InvalidArgument>(op, "ReduceOp::mean needs a floating element type, got ",
                              name_of(dtype_of<T>));
      }
  }
  fail<InvalidArgument>(op, "op is not a ReduceOp (", static_cast<int>(how), ")");
}

template <Element T>
void check_reducible(std::string_view op, ReduceOp how) {
  if (how != ReduceOp::sum && how != ReduceOp::max && how != ReduceOp::min &&
      how != ReduceOp::mean) {
    fail<InvalidArgument>(op, "op is not a ReduceOp (", static_cast<int>(how), ")");
  }
  if (how == ReduceOp::mean && !Floating<T>) {
    fail<InvalidArgument>(op, "ReduceOp::mean needs a floating element type, got ",
                          name_of(dtype_of<T>));
  }
}

/// The shards of the members of `g`, in group order.
template <Element T>
std::vector<const DeviceArray<T>*> inputs_of(const MeshArray<T>& a, const MeshGroup& g) {
  std::vector<const DeviceArray<T>*> inputs;
  for (std::int64_t m : g.members) inputs.push_back(&a.shard(m));
  return inputs;
}

/// For each group: `place(g)` puts the collective on the links and says when each member has
/// its data; `make(g, p, arrival)` builds member p's result.
template <Element T, class Place, class Make>
MeshArray<T> per_member(const MeshArray<T>& a, const std::vector<MeshGroup>& groups, Place&& place,
                        Make&& make) {
  std::vector<DeviceArray<T>> out(static_cast<std::size_t>(a.size()));
  for (const MeshGroup& g : groups) {
    const std::vector<Duration> arrivals = place(g);
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      out[static_cast<std::size_t>(g.members[p])] = make(g, p, arrivals[p]);
    }
  }
  return MeshArray<T>::from_shards(a.mesh(), std::move(out));
}

/// Places a collective whose plan needs only the size of one member's shard (all-reduce,
/// reduce-scatter, all-to-all) on the links: when each member of `g` has its data.
template <Element T>
std::vector<Duration> place_by_shard(MeshState& mesh, const MeshArray<T>& a, const MeshGroup& g,
                                     Collective c, std::string_view op) {
  const auto inputs = inputs_of(a, g);
  const CollectivePlan plan =
      plan_collective(c, g.topology, static_cast<std::int64_t>(g.members.size()),
                      bytes_of_shard(*inputs[0]), mesh.spec.link);
  return place_on_links(mesh, plan, g, inputs, op);
}

/// Every member's shard, received at `here` by `arrival`, in group order.
template <Element T>
std::vector<DeviceArray<T>> receive_all(std::string_view op, const MeshArray<T>& a,
                                        const MeshGroup& g, const Device& here, Duration arrival) {
  std::vector<DeviceArray<T>> parts;
  for (std::int64_t m : g.members) parts.push_back(receive(op, a.shard(m), here, arrival));
  return parts;
}

/// Part p (of as many as members) along `dim` of every member's shard, received at `here` by
/// `arrival`, in group order.
template <Element T>
std::vector<DeviceArray<T>> receive_parts(std::string_view op, const MeshArray<T>& a,
                                          const MeshGroup& g, std::size_t p, int dim,
                                          const Device& here, Duration arrival) {
  const std::int64_t part = part_size(op, a, g, dim);
  const auto begin = static_cast<std::int64_t>(p) * part;
  std::vector<DeviceArray<T>> parts;
  for (std::int64_t m : g.members)
    // recorded_slice, not slice: a gradient tape must see the cut, or the part's gradient
    // would never reach the shard it came from.
    parts.push_back(
        receive(op, recorded_slice(op, a.shard(m), dim, begin, begin + part), here, arrival));
  return parts;
}

}  // namespace detail

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
  const auto groups = detail::mesh_groups(mesh.spec, axis, name);
  for (const auto& g : groups) detail::check_same_shapes(name, a, g);
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(" + std::string(detail::reduce_op_name(op)) + ")", a, axis);
  });
  return detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        return detail::place_by_shard(mesh, a, g, Collective::all_reduce, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, Duration arrival) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        return detail::reduce_members(name, detail::receive_all(name, a, g, here, arrival), op);
      });
}

/// Every member's shard along mesh axis `axis` (-1: the whole mesh), concatenated along `dim`
/// in group order, on every member. Shards may differ in size along `dim` only. Throws, at the
/// call: InvalidArgument for an empty array, a `dim` or axis out of range; ShapeError when two
/// members' shards differ elsewhere (naming both devices).
template <Element T>
MeshArray<T> all_gather(MeshArray<T> a, int dim = 0, int axis = -1) {
  constexpr std::string_view name = "all_gather";
  detail::MeshState& mesh = detail::operand(name, a);
  const int d = detail::normalize_mesh_dim(name, "dim", dim, a.shard(0).shape().rank());
  const auto groups = detail::mesh_groups(mesh.spec, axis, name);
  for (const auto& g : groups) detail::check_same_shapes(name, a, g, d);
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(dim " + std::to_string(d) + ")", a, axis);
  });
  return detail::per_member(
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
      [&](const detail::MeshGroup& g, std::size_t p, Duration arrival) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        const auto parts = detail::receive_all(name, a, g, here, arrival);
        return parts.size() == 1 ? parts[0] : detail::concat(name, parts, d);
      });
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
  const int d = detail::normalize_mesh_dim(name, "dim", dim, a.shard(0).shape().rank());
  const auto groups = detail::mesh_groups(mesh.spec, axis, name);
  for (const auto& g : groups) {
    detail::check_same_shapes(name, a, g);
    detail::part_size(name, a, g, d);
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(dim " + std::to_string(d) + ", " + std::string(detail::reduce_op_name(op)) + ")", a, axis);
  });
  return detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        return detail::place_by_shard(mesh, a, g, Collective::reduce_scatter, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, Duration arrival) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        return detail::reduce_members(name, detail::receive_parts(name, a, g, p, d, here, arrival),
                                      op);
      });
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
  const std::size_t rank = a.shard(0).shape().rank();
  const int split = detail::normalize_mesh_dim(name, "split_dim", split_dim, rank);
  const int cat = detail::normalize_mesh_dim(name, "concat_dim", concat_dim, rank);
  const auto groups = detail::mesh_groups(mesh.spec, axis, name);
  for (const auto& g : groups) {
    detail::check_same_shapes(name, a, g);
    detail::part_size(name, a, g, split);
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(split_dim " + std::to_string(split) + ", concat_dim " + std::to_string(cat) + ")", a, axis);
  });
  return detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        return detail::place_by_shard(mesh, a, g, Collective::all_to_all, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, Duration arrival) {
        const Device here = mesh.devices[static_cast<std::size_t>(g.members[p])];
        const auto parts = detail::receive_parts(name, a, g, p, split, here, arrival);
        return parts.size() == 1 ? parts[0] : detail::concat(name, parts, cat);
      });
}

/// Every member along mesh axis `axis` receives the shard of position `from` along it.
/// Throws InvalidArgument for an empty array, an axis the mesh lacks, `from` outside the group.
template <Element T>
MeshArray<T> broadcast(MeshArray<T> a, std::int64_t from, int axis = -1) {
  constexpr std::string_view name = "broadcast";
  detail::MeshState& mesh = detail::operand(name, a);
  const auto groups = detail::mesh_groups(mesh.spec, axis, name);
  const auto n = static_cast<std::int64_t>(groups[0].members.size());
  if (from < 0 || from >= n) {
    detail::fail<InvalidArgument>(name, "from ", from, " is not a position of a group of ", n,
                                  " members");
  }
  const detail::RemoteCollective remote(mesh, name, [&] {
    return detail::collective_fingerprint(std::string(name) + "(from " + std::to_string(from) + ")", a, axis);
  });
  return detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        const auto inputs = detail::inputs_of(a, g);
        const std::int64_t bytes = detail::bytes_of_shard(*inputs[static_cast<std::size_t>(from)]);
        const CollectivePlan plan = plan_broadcast(g.topology, n, bytes, from, mesh.spec.link);
        return detail::place_on_links(mesh, plan, g, inputs, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, Duration arrival) {
        const DeviceArray<T>& root = a.shard(g.members[static_cast<std::size_t>(from)]);
        return detail::receive(name, root, mesh.devices[static_cast<std::size_t>(g.members[p])],
                               arrival);
      });
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
  const auto groups = detail::mesh_groups(mesh.spec, axis, name);
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
  return detail::per_member(
      a, groups,
      [&](const detail::MeshGroup& g) {
        const auto inputs = detail::inputs_of(a, g);
        const CollectivePlan plan =
            plan_permute(g.topology, n, detail::bytes_of_shard(*inputs[0]), pairs, mesh.spec.link);
        return detail::place_on_links(mesh, plan, g, inputs, name);
      },
      [&](const detail::MeshGroup& g, std::size_t p, Duration arrival) {
        const DeviceArray<T>& own = a.shard(g.members[p]);
        const std::int64_t s = source_of[p];
        if (s < 0) return ferry::zeros<T>(own.device(), own.shape());
        return detail::receive(name, a.shard(g.members[static_cast<std::size_t>(s)]), own.device(),
                               arrival);
      });
}

}  // namespace ferry
