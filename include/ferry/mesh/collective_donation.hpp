#pragma once
// Donation through the collectives that move shards whole, broadcast and permute: a member's
// result is a shard of its group, of its own shard's shape where the shards agree (always for
// permute, which checks it; for broadcast, where the root's shard has the member's shape), so
// a member whose shard the caller gave away (std::move, no other handle, no live view) can hold
// its result in that shard's buffer, as all_reduce's members do (mesh/collectives.hpp).
//
// A member's result is then two steps of its device. The first holds what the links carry
// (in_flight): in the model the bytes are on the links, not in the device's memory, so it
// takes none; the runtime, which has no links, keeps them in a buffer of its own. The second
// writes them into the given shard (land): a donation, which in the runtime waits until every
// reader submitted before it (another member's in_flight reading this shard: its outgoing
// data) has read it, and in the model is placed no earlier than `at`, which the caller sets
// to when the member's outgoing data has left. One step per member could not do it: on a ring
// shift each member's overwrite would wait for the next member's, round the ring.
//
// Not while a gradient tape or a program trace records (they record each receive as it is),
// nor over processes (their sends are per array); never into a shard the model failed (it has
// no buffer, and the result does not need its values).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/kernels/fill.hpp"
#include "ferry/mesh/collective_support.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/remote_collective.hpp"
#include "ferry/runtime/kernel_step.hpp"

namespace ferry::detail {

/// Whether broadcast and permute may write results into given shards now: no tape, program
/// trace or other process watches.
inline bool moves_donate() noexcept {
  return t_tape == nullptr && t_recorder == nullptr && t_remote_scope == nullptr;
}

/// Whether `own`, a member's shard as the collective holds it, can hold that member's result:
/// the collective's handle is its last (no view), it is row-major in DRAM, and the model did
/// not fail it (`verdict`, its settle).
template <Element T>
bool takes_result(std::string_view op, const DeviceArray<T>& own, const Arrival& verdict) {
  const Step& s = step_of(op, own);
  return moves_donate() && !verdict.failure && s.layout() == Layout{} &&
         donatable(s, dtype_of<T>, s.shape(), Layout{});
}

/// A step of `here` holding `src`'s data as the links bring it (or, with src null, an empty
/// array: the moment `from` says, for a member that receives nothing), arriving as `from`
/// says. The model gives it no memory (StepInfo::model_bytes 0) and no engine.
template <Element T>
DeviceArray<T> in_flight(std::string_view op, const DeviceArray<T>* src, const Device& here,
                         const Arrival& from) {
  const std::shared_ptr<DeviceState>& to = DeviceAccess::state(here);
  Step* inputs[] = {src != nullptr ? &step_of(op, *src) : nullptr};
  const std::span<Step* const> in(inputs, src != nullptr ? 1 : 0);
  // A stepped executor runs only when an export on its own device drives it (see `to`).
  if (src != nullptr && inputs[0]->executor().thread_count() == 0 &&
      &inputs[0]->executor() != &to->executor()) {
    inputs[0]->executor().wait(*inputs[0]);
  }
  auto copy = [](const Step& st) {
    if (st.output_bytes() != 0)
      std::memcpy(st.out<std::byte>(), st.in<std::byte>(0), st.output_bytes());
  };
  Cost arrives;
  arrives.fixed_duration = Duration::zero();
  StepInfo info{StepKind::copy_d2d, op, arrives, Layout{}};
  info.model_bytes = 0;
  return ArrayAccess::wrap<T>(submit_step(to, std::move(info), dtype_of<T>,
                                          src != nullptr ? src->shape() : Shape{0}, in, copy,
                                          &from));
}

/// The member's result in its given shard `own` (takes_result): `arrived`'s data (an
/// in_flight of a shard's shape), or zeros when `arrived` is an empty in_flight (it only says
/// when the shard's own data has left) or no array (the shard sends nothing). A zero-cost copy (the
/// links brought the bytes), or the fill ferry::zeros runs, named as it. `own`, this call's, is the
/// shard's last handle while the step is launched (what launch() donates), and goes when it
/// returns.
template <Element T>
DeviceArray<T> land(std::string_view op, const DeviceArray<T>& arrived, DeviceArray<T> own) {
  Step* both[] = {arrived.valid() ? &step_of(op, arrived) : nullptr, &step_of(op, own)};
  // Without `arrived` (zeros for a member that sends nothing): the shard alone.
  const std::span<Step* const> inputs = arrived.valid() ? std::span<Step* const>(both)
                                                        : std::span<Step* const>(both + 1, 1);
  const std::uint32_t given = arrived.valid() ? 2u : 1u;
  const Shape shape = own.shape();
  const std::shared_ptr<DeviceState>& dev = both[1]->device();
  if (arrived.valid() && arrived.shape() == shape) {
    Cost arrives;
    arrives.fixed_duration = Duration::zero();
    return launch<T>(dev, {StepKind::copy_d2d, op, arrives}, shape, inputs,
                     [](const Step& st) {
                       if (st.output_bytes() != 0)
                         std::memcpy(st.out<std::byte>(), st.in<std::byte>(0), st.output_bytes());
                     },
                     LayoutRule::row_major, given);
  }
  const double bytes = static_cast<double>(shape.numel()) * sizeof(T);
  const auto n = static_cast<std::size_t>(shape.numel());
  return launch<T>(dev, {StepKind::compute, "zeros", {0, 0, bytes}}, shape, inputs,
                   [n](const Step& st) { kernels::fill(st.out<T>(), n, T{}, st.runner()); },
                   LayoutRule::row_major, given);
}

/// One member of a broadcast or permute, by position in its group (the same in every group):
/// the position whose shard it gets (`from`: -1 none, it gets zeros; its own position: it
/// keeps its shard) and the one its shard is sent to (`to`: -1 none, or it keeps it anyway).
struct MemberMove {
  std::int64_t from = -1;
  std::int64_t to = -1;
};

/// A broadcast's or permute's results, each given shard that can (takes_result) holding its
/// member's: `place(g)` puts group g on the links (a Placed), `moves[p]` says what position p
/// gets and sends, `make(g, p, placed)` is a member's result when its shard cannot take it.
/// `a`, the collective's operand, is left without shards. Every in_flight (and every read
/// `make` submits) comes before any land: a donation waits only for the readers before it.
template <Element T, class Place, class Make>
MeshArray<T> move_members(std::string_view op, MeshArray<T>& a,
                          const std::vector<MeshGroup>& groups,
                          const std::vector<MemberMove>& moves, Place&& place, Make&& make) {
  const Mesh on = a.mesh();
  const MeshState& mesh = MeshAccess::state(on);
  const auto n = static_cast<std::size_t>(a.size());
  std::vector<DeviceArray<T>> out(n);
  std::vector<DeviceArray<T>> arrived(n);
  std::vector<bool> lands(n, false);
  for (const MeshGroup& g : groups) {
    const Placed placed = place(g);
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      const auto m = static_cast<std::size_t>(g.members[p]);
      const MemberMove mv = moves[p];
      // in_flight copies its source's bytes as they lie: a row-major one in DRAM, of the
      // shard's own shape (a broadcast's root may have another).
      // (Shapes compared on the steps: DeviceArray::shape() makes a copy.)
      const DeviceArray<T>& own = a.shard(g.members[p]);
      const DeviceArray<T>* source =
          mv.from < 0 ? nullptr : &a.shard(g.members[static_cast<std::size_t>(mv.from)]);
      const bool fits =
          source == nullptr || (source->layout() == Layout{} &&
                                step_of(op, *source).shape() == step_of(op, own).shape());
      if (mv.from == static_cast<std::int64_t>(p) || !fits ||
          !takes_result(op, own, placed.verdicts[p])) {
        out[m] = make(g, p, placed);
        continue;
      }
      lands[m] = true;
      // Its shard is overwritten once its own data has left (arrived where it goes) too.
      Arrival at;
      if (mv.to >= 0) at.at = placed.arrivals[static_cast<std::size_t>(mv.to)];
      const Device& here = mesh.devices[m];
      if (mv.from >= 0) {
        const auto from = static_cast<std::size_t>(mv.from);
        at.at = std::max({at.at, placed.arrivals[p], placed.verdicts[from].at});
        at.failure = placed.verdicts[from].failure;
        arrived[m] = in_flight(op, source, here, at);
        // The source's buffer is read until its data is here, not until this member's own
        // data has left too (`at`).
        Step* const read[] = {&step_of(op, *source)};
        read_over_links(read, *DeviceAccess::state(here),
                        std::max(placed.arrivals[p], placed.verdicts[from].at));
      } else if (mv.to >= 0) {
        arrived[m] = in_flight<T>(op, nullptr, here, at);
      }
    }
  }
  std::vector<DeviceArray<T>> shards = std::move(a).shards();  // a given shard: held here alone
  for (std::size_t m = 0; m < n; ++m) {
    if (lands[m]) out[m] = land(op, arrived[m], std::move(shards[m]));
  }
  return MeshArray<T>::from_shards(on, std::move(out));
}

}  // namespace ferry::detail
