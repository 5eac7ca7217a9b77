#pragma once
// What the six collectives (mesh/collectives.hpp) share: the arrival times of a plan run over
// the groups of mesh/mesh_groups.hpp on the mesh's links, the receive of
// one member's data on another member's device (receive, receive_all, receive_parts, with
// their work across processes and their gradients), the checks of their operands, and the
// loop that builds each member's result (per_member). It is its own file because none of it
// is one collective: each collective is its checks, its plan and its per-member result on top
// of this, and distribute, redistribute and spmd use the receives too.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/runtime/kernel_step.hpp"

namespace ferry::detail {

/// A collective placed on the links: when each member has its data (`arrivals`, in value
/// order) and the model's verdict on each member's input (`verdicts`, in value order), which
/// the receives of those same inputs take instead of settling each again (n members read n
/// inputs: n settles, not n squared).
struct Placed {
  std::vector<Duration> arrivals;
  std::vector<Arrival> verdicts;
};

/// The placement of a collective whose plan is `plan`, member i's input being `inputs[i]`:
/// the inputs are settled on their devices' models, then the plan runs on the mesh's links.
template <Element T>
Placed place_on_links(MeshState& mesh, const CollectivePlan& plan, const MeshGroup& group,
                      const std::vector<const DeviceArray<T>*>& inputs, std::string_view op) {
  Placed placed;
  placed.verdicts.reserve(inputs.size());
  std::vector<Duration> ready;
  ready.reserve(inputs.size());
  for (const DeviceArray<T>* in : inputs) {
    Step& s = step_of(op, *in);
    placed.verdicts.push_back(s.device()->settle(s));
    ready.push_back(placed.verdicts.back().at);
  }
  if (group.path.empty()) {
    std::lock_guard lock(mesh.net->mutex);
    placed.arrivals = mesh.net->links.run(plan, group.members, ready);
    return placed;
  }
  // The plan's positions are the path's: member p's data starts at the path's position of its
  // device, and each member's arrival comes back in value order.
  std::vector<Duration> on_path(ready.size());
  for (std::size_t p = 0; p < ready.size(); ++p) {
    on_path[static_cast<std::size_t>(group.path_position(static_cast<std::int64_t>(p)))] = ready[p];
  }
  std::vector<Duration> at;
  {
    std::lock_guard lock(mesh.net->mutex);
    at = mesh.net->links.run(plan, group.path, on_path);
  }
  for (std::size_t p = 0; p < ready.size(); ++p) {
    ready[p] = at[static_cast<std::size_t>(group.path_position(static_cast<std::int64_t>(p)))];
  }
  placed.arrivals = std::move(ready);
  return placed;
}

/// A copy of `src` onto `dst`, a step of `dst` named `name` whose data arrives at `at` (over
/// links the collective placed) or fails as `src` did. Gradients flow back as through `to`.
/// Inside a collective over processes (RemoteCollective): a copy out of a device this process
/// owns to one it does not is sent to that device's process, a copy into one it owns from one
/// it does not waits for the bytes that process sends, and a copy between two of its own waits
/// until every process is known to make the same call; a device outside the mesh (the host,
/// for to_host) counts as this process's, and receives from every process. `settled`: the
/// model's verdict on src when the caller has it already (place_on_links): a command once
/// done stays done, so settling it again would only repeat the answer. A tape that sees a
/// receive over processes records a backward that throws NotDifferentiable (see below).
template <Element T>
DeviceArray<T> receive(std::string_view name, const DeviceArray<T>& src, const Device& dst,
                       Duration at, const Arrival* settled = nullptr) {
  Step& s = step_of(name, src);
  const std::shared_ptr<DeviceState>& to = DeviceAccess::state(dst);
  if (to == s.device()) return src;
  Ref<Step> gate;  // what the copy reads instead of src (remote data), or waits for besides
  bool remote_source = false;
  // The model's verdict on src: a fault it injected there fails src only in the model, so a
  // send to another process must carry it (the kernel that made the bytes ran all the same).
  Arrival from = settled != nullptr ? *settled : s.device()->settle(s);
  if (RemoteScope* r = t_remote_scope) {
    RemoteMesh& net = *r->mesh->remote;
    const std::int64_t from_member = r->mesh->member_of(s.device().get());
    const std::int64_t to_member = r->mesh->member_of(to.get());
    const bool here_from = from_member < 0 || net.local(from_member);
    const bool here_to = to_member < 0 || net.local(to_member);
    // A device that computes (the host, for to_host) needs the source's values, which a mesh
    // that is model-only on every process has nowhere: refused on every process alike, as
    // `to` refuses a model-only array in one process.
    if (!to->model_only() && (here_from ? !s.has_values() : !net.values())) {
      fail<NoValues>(name, "the array ", s.info().name, " made on ", s.device()->name(),
                     " has no values to send to ", to->name(), ": mesh ", r->mesh->spec.name,
                     " is model-only on every process");
    }
    if (here_from && (!here_to || to_member < 0))
      net.send(*r->call, from_member, to_member, s, from.failure);
    if (!here_from && here_to) {
      gate = net.expect(*r->call, from_member, to_member, s);
      remote_source = true;
    } else if (here_from && here_to) {
      gate = net.verified(*r->call, to);
    }
  }
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
  Tape* tape = outermost_tape();
  if (tape != nullptr && t_remote_scope != nullptr) {
    // Over processes, a collective records its group with the tape hidden
    // (mesh/collective_tape.hpp), so only copies outside one come here (distribute's and
    // to_host's receives). Their backward would be copies between processes outside any
    // collective: refused, on every process alike (recorded from `s`, local or stand-in, never
    // from the gate, which only some processes have).
    Step* const source[] = {&s};
    record_grad<T>(*tape, source, *t, [op = std::string(name)](auto, GradCall&) {
      fail<NotDifferentiable>(op, "has no gradient over processes: a copy between processes "
                                  "outside a collective (the collectives have one)");
    });
  } else if (tape != nullptr) {
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

/// The shards of the members of `g`, in group order.
template <Element T>
std::vector<const DeviceArray<T>*> inputs_of(const MeshArray<T>& a, const MeshGroup& g) {
  std::vector<const DeviceArray<T>*> inputs;
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

/// Every member's shard, received at `here` by `arrival`, in group order; `verdicts` holds
/// each shard's verdict in group order (Placed::verdicts).
template <Element T>
std::vector<DeviceArray<T>> receive_all(std::string_view op, const MeshArray<T>& a,
                                        const MeshGroup& g, const Device& here, Duration arrival,
                                        const std::vector<Arrival>& verdicts) {
  std::vector<DeviceArray<T>> parts;
  parts.reserve(g.members.size());
  for (std::size_t i = 0; i < g.members.size(); ++i)
    parts.push_back(receive(op, a.shard(g.members[i]), here, arrival, &verdicts[i]));
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

/// The data of every member of a group on one device, in group order, as a reduction reads
/// it: group position i is the shape's elements at element `at[i].offset` of
/// `arrays[at[i].array]`.
template <Element T>
struct MemberData {
  struct Where {
    std::size_t array = 0;
    std::int64_t offset = 0;
  };
  std::vector<DeviceArray<T>> arrays;
  std::vector<Where> at;
  Shape shape;
};

/// `parts` as MemberData: position i is parts[i] (the shape of the first).
template <Element T>
MemberData<T> as_member_data(std::vector<DeviceArray<T>> parts) {
  MemberData<T> data;
  for (std::size_t i = 0; i < parts.size(); ++i) data.at.push_back({i, 0});
  data.shape = parts.front().shape();
  data.arrays = std::move(parts);
  return data;
}

/// Set by tests only: every collective receives one part per step, as under a tape, so that
/// a test can compare the batched path with the one it replaces on the same program.
inline thread_local bool t_receive_each = false;

/// Whether a collective's receives may come in one step per member (receive_together): no
/// gradient tape or program recorder watches (they record each receive and each cut, and
/// keep their own path), and no other process takes part (its sends are per array).
inline bool receives_batched() noexcept {
  return t_tape == nullptr && t_recorder == nullptr && t_remote_scope == nullptr &&
         !t_receive_each;
}

/// receives_batched(), and every shard of `g`'s members row-major in DRAM (the one layout
/// receive_together copies and a reduction or concat_members reads where it lies).
template <Element T>
bool batches(const MeshArray<T>& a, const MeshGroup& g) {
  if (!receives_batched()) return false;
  for (std::int64_t m : g.members) {
    if (a.shard(m).layout() != Layout{}) return false;
  }
  return true;
}

/// The steps one step of a collective reads: in place for a group's worth (no allocation per
/// member), on the heap beyond.
class StepList {
 public:
  explicit StepList(std::size_t n) : n_(n) {
    if (n > kFew) many_.resize(n);
  }
  StepList(const StepList&) = delete;  // span() points into the list itself
  StepList& operator=(const StepList&) = delete;
  Step*& operator[](std::size_t i) noexcept { return n_ > kFew ? many_[i] : few_[i]; }
  std::span<Step* const> span() const noexcept {
    return {n_ > kFew ? many_.data() : few_.data(), n_};
  }

 private:
  static constexpr std::size_t kFew = 16;
  std::array<Step*, kFew> few_{};
  std::vector<Step*> many_;
  std::size_t n_;
};

/// One step of `here` that receives, back to back in group order, the elements
/// [begin, begin + part) along `dim` of the shard of every member of `g` but position `p`
/// (each of `shape`, row-major in DRAM, on another device; dim < 0: the whole of each),
/// arriving when the last of them would: at `arrival` or when its source's verdict
/// (`verdicts`, in group order) says, whichever is later, and failing as the first of them that
/// failed. The links carried the bytes (the collective placed them); the step costs the
/// receiving device nothing, as each receive's own step did, and holds as many bytes as they
/// held together. A flat array.
template <Element T>
DeviceArray<T> receive_together(std::string_view op, const MeshArray<T>& a, const MeshGroup& g,
                                std::size_t p, const std::vector<Arrival>& verdicts,
                                const Shape& shape, int dim, std::int64_t begin,
                                std::int64_t part, const Device& here, Duration arrival) {
  const std::shared_ptr<DeviceState>& to = DeviceAccess::state(here);
  const std::size_t sources = g.members.size() - 1;
  StepList inputs(sources);
  Arrival from;
  from.at = arrival;
  for (std::size_t i = 0, k = 0; i < g.members.size(); ++i) {
    if (i == p) continue;
    Step& s = step_of(op, a.shard(g.members[i]));
    inputs[k++] = &s;
    from.at = std::max(from.at, verdicts[i].at);
    if (!from.failure) from.failure = verdicts[i].failure;
    // A stepped executor runs only when an export on its own device drives it (see `to`).
    if (s.executor().thread_count() == 0 && &s.executor() != &to->executor()) s.executor().wait(s);
  }
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  AxisView v;  // the whole shard: one block
  v.inner = shape.numel();
  if (dim >= 0) v = axis_view(shape, static_cast<std::size_t>(dim));
  const std::int64_t size = dim >= 0 ? v.size : 1;
  const std::int64_t length = dim >= 0 ? part : 1;
  const std::int64_t first = dim >= 0 ? begin * v.inner * bytes : 0;
  const std::int64_t src_pitch = size * v.inner * bytes;
  const std::int64_t block = length * v.inner * bytes;
  const std::int64_t outer = v.outer;
  const std::int64_t each = block * outer;  // the bytes of one source's part
  auto copy = [first, src_pitch, block, outer, each](const Step& st) {
    if (each == 0) return;  // an empty part's source may have no buffer
    for (std::size_t i = 0; i < st.input_count(); ++i) {
      kernels::copy_blocks(st.in<std::byte>(i) + first, src_pitch,
                           st.out<std::byte>() + static_cast<std::int64_t>(i) * each, block,
                           outer, block);
    }
  };
  Cost arrives;
  arrives.fixed_duration = Duration::zero();
  const Shape flat{static_cast<std::int64_t>(sources) * (each / bytes)};
  auto* t = new KernelStep<decltype(copy)>(to, to->executor(),
                                           {StepKind::copy_d2d, std::string(op), arrives, Layout{}},
                                           dtype_of<T>, flat, inputs.span(), copy);
  Ref<Step> ref = Ref<Step>::adopt(t);
  note_submitted(*t);
  to->submit_transfer(*t, from);
  return ArrayAccess::wrap<T>(std::move(ref));
}

/// What member p of `g` reduces or concatenates, on `here` by `arrival`: every member's shard
/// (dim < 0) or its p-th part along `dim`, in group order. Batched (receives_batched(), every
/// shard row-major in DRAM): its own data where it lies (a part that is not one block of its
/// shard: a slice of it) and one receive_together of the others' (as Placed::verdicts says of
/// them): one step where each member's data took one receive and each part one slice.
/// Otherwise one receive per member (and one recorded slice per part, so that a tape sees the
/// cuts).
template <Element T>
MemberData<T> receive_members(std::string_view op, const MeshArray<T>& a, const MeshGroup& g,
                              std::size_t p, int dim, const Device& here, Duration arrival,
                              const std::vector<Arrival>& verdicts) {
  if (!batches(a, g)) {
    return as_member_data(dim < 0 ? receive_all(op, a, g, here, arrival, verdicts)
                                  : receive_parts(op, a, g, p, dim, here, arrival));
  }
  const DeviceArray<T>& own = a.shard(g.members[p]);
  const std::int64_t part = dim < 0 ? 0 : part_size(op, a, g, dim);
  const auto begin = static_cast<std::int64_t>(p) * part;
  MemberData<T> data;
  data.at.resize(g.members.size());
  data.arrays.reserve(2);  // its own data and the receive of the others'
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
                                           here, arrival));
  }
  return data;
}

/// The members' data (receive_members' batched result) concatenated along `dim` in group
/// order, one step of their device: the step, cost and result ferry::concat of the parts makes
/// (so the timeline is the same), reading each part where it lies instead of from a receive of
/// its own. One member: its data as it is.
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
  const std::int64_t out_pitch = block * static_cast<std::int64_t>(n);
  const std::int64_t outer = v.outer;
  // Each part is row-major and contiguous (a whole shard, a block of one, or one of the
  // received parts back to back), so its rows follow each other at pitch `block`.
  std::vector<std::pair<std::size_t, std::int64_t>> where;  // (input, byte offset) of each
  where.reserve(n);
  for (const auto& w : data.at) where.emplace_back(w.array, w.offset * bytes);
  const auto written = static_cast<double>(out.numel() * bytes);
  return launch<T>(dev, {StepKind::compute, std::string(op), {0, written, written}}, out, inputs,
                   [where = std::move(where), outer, block, out_pitch](const Step& st) {
                     // An empty result has no buffer to offset into (as concat).
                     if (outer == 0 || out_pitch == 0) return;
                     for (std::size_t i = 0; i < where.size(); ++i) {
                       kernels::copy_blocks(st.in<std::byte>(where[i].first) + where[i].second,
                                            block,
                                            st.out<std::byte>() +
                                                static_cast<std::int64_t>(i) * block,
                                            out_pitch, outer, block, st.runner());
                     }
                   });
}

}  // namespace ferry::detail
