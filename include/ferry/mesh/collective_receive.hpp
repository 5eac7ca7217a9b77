#pragma once
// The step by which a collective's data lands on a member's device: the links carried the
// bytes (the collective placed its plan on them), so the step costs the receiving device
// nothing and arrives when the plan says. One array (receive, with its work across processes
// and its gradient) or, batched, the parts of every other member in one step
// (receive_together). Used by the collectives (mesh/collective_support.hpp, mesh/
// all_reduce_parts.hpp), distribute, redistribute and spmd.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/core/inline_list.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/runtime/kernel_step.hpp"

namespace ferry::detail {

/// Runs `source`'s stepped executor up to it when that executor is not `to`'s: a stepped
/// executor runs only when an export on its own device drives it (see `to`).
inline void drive_source(Step& source, const DeviceState& to) {
  if (source.executor().thread_count() == 0 && &source.executor() != &to.executor())
    source.executor().wait(source);
}

/// The links read each of `inputs` (sources in this process, settled on their devices) that
/// lives on another device than `to` until its data has arrived on `to`, at `until`: its
/// device's model keeps its buffer in use until then, as a real send buffer is, rather than
/// freeing it, or letting a donation write over it, while its data is still leaving.
inline void read_over_links(std::span<Step* const> inputs, DeviceState& to, Duration until) {
  for (Step* in : inputs) {
    if (in->device().get() != &to) in->device()->read_until(*in, until);
  }
}

/// A step of `to` named `op` whose `copy` fills an array of `shape` from `inputs`, arriving as
/// `from` says: the links carried the bytes (the collective placed them), so it costs the
/// receiving device nothing. `gate`: inputs[0], a gate whose received bytes the step takes
/// over as its output (GateStep::hand_to) rather than `copy` copying them: on the host only,
/// the model sees the same step either way. `lands`: the bytes are a part of a result that a
/// join makes next (an all-gather's, an all-to-all's, an all-reduce's gathered half), which a
/// real library's links write in place: the model gives the step no memory of its own
/// (StepInfo::model_bytes 0), the join's result holds them. The runtime keeps them in a buffer.
template <class Copy>
Ref<Step> submit_receive(std::string_view op, const std::shared_ptr<DeviceState>& to,
                         std::span<Step* const> inputs, DType dtype, const Shape& shape,
                         Layout layout, Copy copy, const Arrival& from, GateStep* gate = nullptr,
                         bool lands = false) {
  Cost arrives;
  arrives.fixed_duration = Duration::zero();
  StepInfo info{StepKind::copy_d2d, op, arrives, layout};
  if (lands) info.model_bytes = 0;
  auto* t = new KernelStep<Copy>(to, to->executor(), std::move(info), dtype, shape, inputs,
                                 std::move(copy));
  Ref<Step> ref = Ref<Step>::adopt(t);
  if (gate != nullptr) gate->hand_to(*t);  // before it is submitted, so before it can run
  try {
    note_submitted(*t);
    to->submit_transfer(*t, from);
  } catch (...) {
    if (gate != nullptr) gate->forget(*t);
    throw;
  }
  return ref;
}

/// The step of receive() (below), for source step `s`: null when `to` is s's device (nothing
/// to copy). Records no gradient: receive() and `to()` do.
inline Ref<Step> receive_step(std::string_view name, Step& s,
                              const std::shared_ptr<DeviceState>& to, Duration at,
                              const Arrival* settled = nullptr, Buffer into = Buffer(),
                              bool lands = false) {
  if (to == s.device()) return {};
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
    // To the host of every process, unless an export is gathered on one (to_host(a,
    // process)): that process reads its own blocks itself.
    if (here_from && (!here_to || (to_member < 0 && r->host_process < 0)))
      net.send(*r->call, from_member, to_member, s, from.failure);
    if (!here_from && here_to) {
      gate = net.expect(*r->call, from_member, to_member, s, std::move(into));
      remote_source = true;
    } else if (here_from && here_to) {
      gate = net.verified(*r->call, to);
    }
  }
  from.at = std::max(from.at, at);
  if (!remote_source) drive_source(s, *to);
  auto copy = [](const Step& st) {
    if (st.output_bytes() != 0)
      std::memcpy(st.out<std::byte>(), st.in<std::byte>(0), st.output_bytes());
  };
  Step* all_inputs[] = {remote_source ? gate.get() : &s, gate.get()};
  const std::span<Step* const> inputs(all_inputs,
                                      gate && !remote_source ? std::size_t{2} : std::size_t{1});
  // Remote data: the step's output is the block MPI received into (the gate hands it over),
  // so there is nothing to copy.
  Ref<Step> ref = remote_source
                      ? submit_receive(name, to, inputs, s.dtype(), s.shape(), s.layout(),
                                       [](const Step&) {}, from,
                                       static_cast<GateStep*>(gate.get()), lands)
                      : submit_receive(name, to, inputs, s.dtype(), s.shape(), s.layout(), copy,
                                       from, nullptr, lands);
  // Data from another process was read there (its sender holds it); a gate is in no model.
  if (!remote_source) read_over_links({&all_inputs[0], 1}, *to, from.at);
  return ref;
}

/// A copy of `src` onto `dst`, a step of `dst` named `name` whose data arrives at `at` (over
/// links the collective placed) or fails as `src` did. Gradients flow back as through `to`.
/// Inside a collective over processes (RemoteCollective): a copy out of a device this process
/// owns to one it does not is sent to that device's process, a copy into one it owns from one
/// it does not waits for the bytes that process sends, and a copy between two of its own waits
/// until every process is known to make the same call; a device outside the mesh (the host,
/// for to_host) counts as this process's, and receives from every process. `settled`: the
/// model's verdict on src when the caller has it already (place_on_links): a command once
/// done stays done, so settling it again would only repeat the answer. `into`: where remote
/// data lands if the transport can receive it there (RemoteMesh::expect), the array's buffer
/// then; let go of otherwise. `lands`: a part of a join's result (submit_receive). Its gradient
/// is the copy back, between processes too (see below).
template <Element T>
DeviceArray<T> receive(std::string_view name, const DeviceArray<T>& src, const Device& dst,
                       Duration at, const Arrival* settled = nullptr, Buffer into = Buffer(),
                       bool lands = false) {
  Step& s = step_of(name, src);
  Ref<Step> ref =
      receive_step(name, s, DeviceAccess::state(dst), at, settled, std::move(into), lands);
  if (!ref) return src;
  // Its backward is the copy back. Over processes a collective records its group with the
  // tape hidden (mesh/collective_tape.hpp), so only copies outside one come here (distribute's
  // and to_host's receives): recorded from `s`, local or stand-in (never from the gate, which
  // only some processes have), so that every process walks the same tape and makes the same
  // copy back (`to()` between processes: MeshNet::copy_across).
  if (Tape* tape = outermost_tape()) {
    Step* const source[] = {&s};
    record_grad<T>(*tape, source, *ref, [](auto tag, GradCall& c) { transfer_backward(tag, c); });
  }
  return ArrayAccess::wrap<T>(std::move(ref));
}

/// The model's verdict on `src` (on member `from` of `mesh`), arriving at member `to` when the
/// links carry its bytes there from when it is ready, as `to()` places them.
inline Arrival carried(MeshState& mesh, Step& src, std::int64_t from, std::int64_t to,
                       std::string_view op) {
  Arrival a = src.device()->settle(src);
  a.at = mesh.net->carry(from, to, static_cast<std::int64_t>(src.output_bytes()), a.at, op);
  return a;
}

/// `to()` between members `from` and `to` of a mesh over processes (MeshNet::copy_across):
/// null when one process owns both (a copy of one process there, the others' stand-ins
/// modeling it); else a call every process makes, placed on the links as `to()` places it,
/// whose bytes the owner of `from` sends to the owner of `to`.
inline Ref<Step> copy_across_processes(MeshState& mesh, Step& src,
                                       const std::shared_ptr<DeviceState>& dst,
                                       std::int64_t from, std::int64_t to, std::string_view op) {
  if (mesh.remote == nullptr || mesh.remote->owner(from) == mesh.remote->owner(to)) return {};
  const RemoteCollective remote(mesh, op, [&] {
    return std::string(op) + " of " + std::string(name_of(src.dtype())) + " " +
           src.shape().to_string() + " from member " + std::to_string(from) + " to member " +
           std::to_string(to);
  });
  const Arrival arrival = carried(mesh, src, from, to, op);
  return receive_step(op, src, dst, arrival.at, &arrival);
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

/// One step of `here` that receives, back to back in group order, the elements
/// [begin, begin + part) along `dim` of the shard of every member of `g` but position `p`
/// (each of `shape`, row-major in DRAM, on another device; dim < 0: the whole of each),
/// arriving when the last of them would: at `arrival` or when its source's verdict
/// (`verdicts`, in group order) says, whichever is later, and failing as the first of them that
/// failed. The links carried the bytes (the collective placed them); the step costs the
/// receiving device nothing, as each receive's own step did, and holds as many bytes as they
/// held together (none in the model when it `lands`: see submit_receive). A flat array.
template <Element T>
DeviceArray<T> receive_together(std::string_view op, const MeshArray<T>& a, const MeshGroup& g,
                                std::size_t p, const std::vector<Arrival>& verdicts,
                                const Shape& shape, int dim, std::int64_t begin,
                                std::int64_t part, const Device& here, Duration arrival,
                                bool lands) {
  const std::shared_ptr<DeviceState>& to = DeviceAccess::state(here);
  const std::size_t sources = g.members.size() - 1;
  InlineList<Step*, 16> inputs(sources);  // one a member: in place for a group's worth
  Arrival from;
  from.at = arrival;
  for (std::size_t i = 0, k = 0; i < g.members.size(); ++i) {
    if (i == p) continue;
    Step& s = step_of(op, a.shard(g.members[i]));
    inputs[k++] = &s;
    from.at = std::max(from.at, verdicts[i].at);
    if (!from.failure) from.failure = verdicts[i].failure;
    drive_source(s, *to);
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
  const Shape flat{static_cast<std::int64_t>(sources) * (each / bytes)};
  Ref<Step> ref =
      submit_receive(op, to, inputs.span(), dtype_of<T>, flat, Layout{}, copy, from, nullptr,
                     lands);
  read_over_links(inputs.span(), *to, from.at);
  return ArrayAccess::wrap<T>(std::move(ref));
}

}  // namespace ferry::detail
