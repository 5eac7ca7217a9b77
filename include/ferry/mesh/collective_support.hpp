#pragma once
// What the six collectives (mesh/collectives.hpp) share: the arrival times of a plan run over
// the groups of mesh/mesh_groups.hpp on the mesh's links, the receives of every member's data
// or part on another member's device (receive_parts, receive_members, on
// mesh/collective_receive.hpp's steps), the checks of their operands, and the loop that builds
// each member's result (per_member). It is its own file because none of it
// is one collective: each collective is its checks, its plan and its per-member result on top
// of this, and distribute, redistribute and spmd use the receives too.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/inline_list.hpp"
#include "ferry/mesh/collective_receive.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/model/cost_model.hpp"
#include "ferry/model/link_model.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/runtime/kernel_step.hpp"

namespace ferry::detail {

/// A collective placed on the links: when each member has its data (`arrivals`, in value
/// order) and the model's verdict on each member's input (`verdicts`, in value order), which
/// the receives of those same inputs take instead of settling each again (n members read n
/// inputs: n settles, not n squared). For an all-reduce, `reduced` (in value order): when each
/// member has every input of its own part, the end of its reduce-scatter half on a stepped
/// plan (LinkModel::run's `reduced`).
struct Placed {
  std::vector<Duration> arrivals;
  std::vector<Arrival> verdicts;
  std::vector<Duration> reduced;
  /// A ring or line reduce-scatter (or all-reduce): each member's reduction of each step, as
  /// the links placed them (LinkModel::run), by member in value order, then by step.
  std::vector<ReductionStep> reductions;

  /// Member p's (value order) reductions, step by step; none where the plan has none.
  std::span<const ReductionStep> reductions_of(std::size_t p) const {
    // (Not std::ranges::equal_range: clang 14 cannot use libstdc++ 12's subrange.)
    const auto member = static_cast<std::int64_t>(p);
    const auto first = std::partition_point(reductions.begin(), reductions.end(),
                                            [member](const auto& r) { return r.member < member; });
    const auto last = std::partition_point(first, reductions.end(),
                                           [member](const auto& r) { return r.member == member; });
    return {first, last};
  }
};

/// What a member of a ring or line reduce-scatter costs its chip to reduce `bytes` (of T's)
/// received in one step into its partial: the fold of two parts (reduce_members' cost for n),
/// reading the partial and what arrived and writing the partial.
template <Element T>
Cost step_reduction_cost(std::int64_t bytes) {
  const double elements = static_cast<double>(bytes) / static_cast<double>(sizeof(T));
  const auto size = static_cast<double>(sizeof(T));
  return reduction_cost(2 * elements, 2 * elements * size, elements * size);
}

/// A step's reduction alone on a member's chip: the solo duration of a command of
/// step_reduction_cost on its DeviceSpec, as the device's model times it (inputs in DRAM),
/// remembered for each (device, bytes) the call asks about.
template <Element T>
class SoloReductionTimes final : public ReductionTimes {
 public:
  explicit SoloReductionTimes(const MeshSpec& spec) : spec_(spec) {}

  Duration time(std::int64_t device, std::int64_t bytes) override {
    for (const Known& k : known_) {
      if (k.device == device && k.bytes == bytes) return k.time;
    }
    const DeviceSpec& d = spec_.devices[static_cast<std::size_t>(device)];
    const Duration t =
        solo_duration(d, plan_step(d, StepKind::compute, step_reduction_cost<T>(bytes),
                                   dtype_of<T>));
    known_.push_back({device, bytes, t});
    return t;
  }

 private:
  struct Known {
    std::int64_t device;
    std::int64_t bytes;
    Duration time;
  };
  const MeshSpec& spec_;
  std::vector<Known> known_;
};

/// Whether a collective of `plan` reduces step by step on its members' chips: a ring or line
/// reduce-scatter, or an all-reduce's half of one. A one-shot plan, or one through a switch,
/// reduces once per member, after its one step of reductions.
inline bool reduces_each_step(const CollectivePlan& plan) noexcept {
  return (plan.collective == Collective::reduce_scatter ||
          plan.collective == Collective::all_reduce) &&
         (plan.algorithm == CollectiveAlgorithm::ring ||
          plan.algorithm == CollectiveAlgorithm::line);
}

/// The placement of a collective whose plan is `plan`, member i's input being `inputs[i]`:
/// the inputs are settled on their devices' models, then the plan runs on the mesh's links
/// (with each step's reductions where reduces_each_step).
template <Element T>
Placed place_on_links(MeshState& mesh, const CollectivePlan& plan, const MeshGroup& group,
                      const std::vector<const DeviceArray<T>*>& inputs, std::string_view op) {
  Placed placed;
  placed.verdicts.reserve(inputs.size());
  InlineList<Duration, 16> ready;  // in place for a group's worth: a call's list less
  for (const DeviceArray<T>* in : inputs) {
    Step& s = step_of(op, *in);
    placed.verdicts.push_back(s.device()->settle(s));
    ready.push_back(placed.verdicts.back().at);
  }
  std::vector<Duration>* reduced =
      plan.collective == Collective::all_reduce ? &placed.reduced : nullptr;
  SoloReductionTimes<T> solo(mesh.spec);
  ReductionTimes* times = reduces_each_step(plan) ? &solo : nullptr;
  std::vector<ReductionStep>* steps = times != nullptr ? &placed.reductions : nullptr;
  // LinkModel::run gives them step by step; reductions_of finds a member's by binary search.
  const auto by_member = [&placed] {
    std::stable_sort(placed.reductions.begin(), placed.reductions.end(),
                     [](const auto& a, const auto& b) { return a.member < b.member; });
  };
  if (group.path.empty()) {
    {
      std::lock_guard lock(mesh.net->mutex);
      placed.arrivals =
          mesh.net->links.run(plan, group.members, ready.span(), reduced, times, steps);
    }
    by_member();
    return placed;
  }
  // The plan's positions are the path's: member p's data starts at the path's position of its
  // device, and each member's arrival comes back in value order.
  std::vector<Duration> on_path(ready.size());
  for (std::size_t p = 0; p < ready.size(); ++p) {
    on_path[static_cast<std::size_t>(group.path_position(static_cast<std::int64_t>(p)))] = ready[p];
  }
  std::vector<Duration> at;
  std::vector<Duration> reduced_on_path;
  {
    std::lock_guard lock(mesh.net->mutex);
    at = mesh.net->links.run(plan, group.path, on_path,
                             reduced != nullptr ? &reduced_on_path : nullptr, times, steps);
  }
  if (reduced != nullptr) reduced->resize(ready.size());
  std::vector<std::int64_t> value_of(ready.size());  // a path position's member, in value order
  for (std::size_t p = 0; p < ready.size(); ++p) {
    const auto q = static_cast<std::size_t>(group.path_position(static_cast<std::int64_t>(p)));
    ready[p] = at[q];
    value_of[q] = static_cast<std::int64_t>(p);
    if (reduced != nullptr) (*reduced)[p] = reduced_on_path[q];
  }
  for (ReductionStep& r : placed.reductions)
    r.member = value_of[static_cast<std::size_t>(r.member)];
  by_member();
  placed.arrivals.assign(ready.begin(), ready.end());
  return placed;
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
  if (g.members.size() < 2) return;
  const DeviceArray<T>& first = a.shard(g.members[0]);
  // Each shape asked for once: DeviceArray::shape() makes a copy.
  const Shape want = first.shape();
  for (std::size_t i = 1; i < g.members.size(); ++i) {
    const DeviceArray<T>& other = a.shard(g.members[i]);
    const Shape got = other.shape();
    bool same = got.rank() == want.rank();
    for (std::size_t d = 0; same && d < want.rank(); ++d) {
      same = static_cast<int>(d) == except || got.dims()[d] == want.dims()[d];
    }
    if (!same) {
      fail<ShapeError>(op, "shards differ",
                       except >= 0 ? " outside dim " + std::to_string(except) : std::string(), ": ",
                       want.to_string(), " on ", first.device().name(), ", ", got.to_string(),
                       " on ", other.device().name());
    }
  }
}

/// The rank every shard of `a` has, for a collective whose dims count in it. Throws ShapeError
/// naming two shards of different ranks: along a mesh axis, groups that held shards of different
/// ranks would each read a negative dim from a different end.
template <Element T>
std::size_t shards_rank(std::string_view op, const MeshArray<T>& a) {
  const std::size_t rank = a.shard(0).ndim();
  for (std::int64_t i = 1; i < a.size(); ++i) {
    if (a.shard(i).ndim() != rank) {
      fail<ShapeError>(op, "shards differ in rank: ", a.shard(0).shape().to_string(), " on ",
                       a.shard(0).device().name(), ", ", a.shard(i).shape().to_string(), " on ",
                       a.shard(i).device().name(), "; a dim counts in one rank for every member");
    }
  }
  return rank;
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

/// The shards of the members of `g`, in group order.
template <Element T>
std::vector<const DeviceArray<T>*> inputs_of(const MeshArray<T>& a, const MeshGroup& g) {
  std::vector<const DeviceArray<T>*> inputs;
  inputs.reserve(g.members.size());  // one allocation, not one at each growth
  for (std::int64_t m : g.members) inputs.push_back(&a.shard(m));
  return inputs;
}

/// For each group: `place(g)` puts the collective on the links (a Placed); `make(g, p,
/// placed)` builds member p's result.
template <Element T, class Place, class Make>
MeshArray<T> per_member(const MeshArray<T>& a, const std::vector<MeshGroup>& groups, Place&& place,
                        Make&& make) {
  std::vector<DeviceArray<T>> out(static_cast<std::size_t>(a.size()));
  for (const MeshGroup& g : groups) {
    const Placed placed = place(g);
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      out[static_cast<std::size_t>(g.members[p])] = make(g, p, placed);
    }
  }
  return MeshArray<T>::from_shards(a.mesh(), std::move(out));
}

/// Places a collective whose plan needs only the size of one member's shard (all-reduce,
/// reduce-scatter, all-to-all) on the links.
template <Element T>
Placed place_by_shard(MeshState& mesh, const MeshArray<T>& a, const MeshGroup& g, Collective c,
                      std::string_view op) {
  const auto inputs = inputs_of(a, g);
  const auto plan = mesh.plan(c, g.topology, static_cast<std::int64_t>(g.members.size()),
                              bytes_of_shard(*inputs[0]));
  return place_on_links(mesh, *plan, g, inputs, op);
}

/// Part p (of as many as members) along `dim` of every member's shard, received at `here` by
/// `arrival`, in group order; `lands` as submit_receive's.
template <Element T>
std::vector<DeviceArray<T>> receive_parts(std::string_view op, const MeshArray<T>& a,
                                          const MeshGroup& g, std::size_t p, int dim,
                                          const Device& here, Duration arrival, bool lands) {
  const std::int64_t part = part_size(op, a, g, dim);
  const auto begin = static_cast<std::int64_t>(p) * part;
  std::vector<DeviceArray<T>> parts;
  for (std::int64_t m : g.members)
    // recorded_slice, not slice: a gradient tape must see the cut, or the part's gradient
    // would never reach the shard it came from.
    parts.push_back(receive(op, recorded_slice(op, a.shard(m), dim, begin, begin + part), here,
                            arrival, nullptr, Buffer(), lands));
  return parts;
}

/// The data of every member of a group on one device, in group order, as a reduction reads
/// it: group position i is the shape's elements at element `at[i].offset` of
/// `arrays[at[i].array]`.
/// Both lists are in place for a group's worth (InlineList): a collective makes one for every
/// member on every call.
template <Element T>
struct MemberData {
  struct Where {
    std::size_t array = 0;
    std::int64_t offset = 0;
  };
  InlineList<DeviceArray<T>, 2> arrays;  // batched: its own data and one receive of the others'
  InlineList<Where, 8> at;
  Shape shape;
};

/// `parts` as MemberData: position i is parts[i] (the shape of the first).
template <Element T>
MemberData<T> as_member_data(std::vector<DeviceArray<T>> parts) {
  MemberData<T> data;
  for (std::size_t i = 0; i < parts.size(); ++i) data.at.push_back({i, 0});
  data.shape = parts.front().shape();
  for (DeviceArray<T>& x : parts) data.arrays.push_back(std::move(x));
  return data;
}

/// What member p of `g` reduces or concatenates, on `here` by `arrival`: every member's shard
/// (dim < 0) or its p-th part along `dim`, in group order. Batched (receives_batched(), every
/// shard row-major in DRAM): its own data where it lies (a part that is not one block of its
/// shard: a slice of it) and one receive_together of the others' (as Placed::verdicts says of
/// them): one step where each member's data took one receive and each part one slice.
/// Otherwise one receive per member (and one recorded slice per part, so that a tape sees the
/// cuts). `batched`: batches(a, g), which the caller asks once for the group (it reads every
/// member's shard: per member, a group's size squared). `lands`: the others' data hold no
/// memory in the model (StepInfo::model_bytes 0): parts of the result of a join that follows
/// (submit_receive), or parts a ring's member reduces step by step as they pass through its
/// staging buffers (receive_part).
template <Element T>
MemberData<T> receive_members(std::string_view op, const MeshArray<T>& a, const MeshGroup& g,
                              std::size_t p, int dim, const Device& here, Duration arrival,
                              const std::vector<Arrival>& verdicts, bool batched, bool lands) {
  if (!batched && dim < 0) {
    // One receive per member's whole shard, `verdicts` holding each one's verdict in group
    // order (Placed::verdicts), straight into the lists (no vector in between: an allocation
    // a member).
    MemberData<T> data;
    for (std::size_t i = 0; i < g.members.size(); ++i) {
      data.at.push_back({i, 0});
      data.arrays.push_back(
          receive(op, a.shard(g.members[i]), here, arrival, &verdicts[i], Buffer(), lands));
    }
    data.shape = data.arrays[0].shape();
    return data;
  }
  if (!batched) return as_member_data(receive_parts(op, a, g, p, dim, here, arrival, lands));
  const DeviceArray<T>& own = a.shard(g.members[p]);
  const std::int64_t part = dim < 0 ? 0 : part_size(op, a, g, dim);
  const auto begin = static_cast<std::int64_t>(p) * part;
  MemberData<T> data;
  data.at.resize(g.members.size());
  if (dim < 0) {
    data.arrays.push_back(own);
    data.shape = own.shape();
  } else {
    data.shape = with_dim(own.shape(), static_cast<std::size_t>(dim), part);
    const AxisView v = axis_view(own.shape(), static_cast<std::size_t>(dim));
    // A part that is one block of the shard (every dim before `dim` of size 1) is read where it
    // lies, as the view slice would make of it; otherwise slice copies it out.
    if (v.outer == 1) {
      data.arrays.push_back(own);
      data.at[p].offset = begin * v.inner;
    } else {
      data.arrays.push_back(slice(op, own, dim, begin, begin + part));
    }
  }
  const std::int64_t count = data.shape.numel();
  for (std::size_t i = 0, k = 0; i < g.members.size(); ++i) {
    if (i == p) continue;  // at[p] is in arrays[0]
    data.at[i] = {1, static_cast<std::int64_t>(k++) * count};
  }
  if (g.members.size() > 1) {
    data.arrays.push_back(receive_together(op, a, g, p, verdicts, own.shape(), dim, begin, part,
                                           here, arrival, lands));
  }
  return data;
}

/// The members' data (receive_members' batched result) concatenated along `dim` in group
/// order, one step of their device: the step, cost and result detail::concat of the parts
/// with `own` makes (so the timeline is the same), reading each part where it lies instead of
/// from a receive of its own. One member: its data as it is.
template <Element T>
DeviceArray<T> concat_members(std::string_view op, const MemberData<T>& data, int dim) {
  const std::size_t n = data.at.size();
  if (n == 1) return data.arrays[0];  // the whole of its own shard (part = size, offset 0)
  std::vector<Step*> inputs;
  inputs.reserve(data.arrays.size());
  for (const DeviceArray<T>& x : data.arrays) inputs.push_back(&step_of(op, x));
  const std::shared_ptr<DeviceState>& dev = common_device(op, inputs);
  const auto d = static_cast<std::size_t>(dim);
  const Shape out = with_dim(data.shape, d, data.shape.dims()[d] * static_cast<std::int64_t>(n));
  const AxisView v = axis_view(out, d);
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t block = data.shape.dims()[d] * v.inner * bytes;  // a part's row
  // Each part is row-major and contiguous (a whole shard, a block of one, or one of the
  // received parts back to back), so its rows follow each other at pitch `block`.
  std::vector<JoinPart> parts;
  parts.reserve(n);
  for (const auto& w : data.at) parts.push_back({w.array, w.offset * bytes, block});
  // The others' parts land where they belong (the links write them, as a real library's do):
  // the step copies its own part only.
  const auto written = static_cast<double>(data.shape.numel() * bytes);
  return join_rows<T>(op, dev, out, inputs, std::move(parts), v.outer, written);
}

}  // namespace ferry::detail
