#pragma once
// all_reduce's data path (mesh/collectives.hpp): what each member receives and computes, as the
// algorithm the plan put on the links does. Where the plan is stepped (a ring or line: a
// reduce-scatter then an all-gather; through a switch: the same in two steps), member p receives
// part p of every member's shard, reduces them into part p of the result, and then receives every
// other member's reduced part and joins the n parts into the result: each member reduces one part's
// worth and holds (n-1)/n of a shard received in each half, and over processes each rank sends and
// receives 2(n-1)/n of a shard, as a ring does. In the model, on a ring or line, member p reduces
// its part step by step as the reduce-scatter half's messages arrive (LinkModel::run places each
// step's reduction at its chip's solo time, and partial_reductions puts one command per step on the
// chip; the fold that computes the values is the last, once its part's last message is in), and
// the all-gather half's first messages stream out behind that last reduction as the links placed
// it. The other members' reduced parts arrive when the plan's last message does: their chips'
// reductions are not awaited there, which would decide their chips' schedules at the call. Where
// the plan is one-shot (below LinkSpec::one_shot_bytes), or there is nothing to move (one member,
// an empty shard), every member receives every other member's whole shard and reduces the n of
// them, as vLLM's and TensorRT-LLM's one-shot all-reduce does. The parts are the shard's elements
// (row-major, flat) cut as NumPy's array_split cuts them, so any shape works.
//
// A result's every element is the reduction of the members' values in group order either way, with
// the bits of ferry::sum (max, min, mean) of the shards stacked: the reduction of a part follows
// the whole shard's order (kernels::reduce_parts' `whole`). Under a program trace (or a gradient
// tape the collective does not hide: an integer one's), the whole-shard path, whose stack and
// reduction are ops they record. A given shard (std::move) holds its member's result: the join
// takes its buffer over once every read of it (the other members' receives of its parts, its own
// part's reduction) is done.

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
#include "ferry/core/inline_list.hpp"
#include "ferry/mesh/collective_support.hpp"
#include "ferry/mesh/member_reduction.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/model/collective_plan.hpp"
#include "ferry/ops/reshape.hpp"
#include "ferry/ops/slice.hpp"
#include "ferry/runtime/kernel_step.hpp"

namespace ferry::detail {

/// Whether all_reduce reduces in parts on links that run `plan`: a stepped plan (ring, line,
/// or two steps through a switch), no program trace and no tape that sees the reduction (the
/// collective hides a floating one's: mesh/collective_tape.hpp).
inline bool reduces_in_parts(const CollectivePlan& plan) noexcept {
  const bool stepped = plan.algorithm == CollectiveAlgorithm::ring ||
                       plan.algorithm == CollectiveAlgorithm::line ||
                       plan.algorithm == CollectiveAlgorithm::direct;
  return stepped && t_tape == nullptr && t_recorder == nullptr;
}

/// What member p of `g` reduces, on `here` by `arrival`: part p (flat) of every member's shard,
/// in group order; `verdicts` holds each shard's (Placed::verdicts). Its own part is read where
/// it lies (no view: its shard stays donatable). Batched: the others' parts in one
/// receive_together; otherwise one receive of a view of each (views whose handles go before
/// any result is made). `together`: batches(a, g), asked once for the group. `streams`: the
/// member reduces step by step as the parts arrive (a ring's or a line's reductions): they pass
/// through the ring's staging buffers into its partial, so in the model they hold no memory of
/// their own (in_flight, as bytes on the links); a member holds its shard and its part.
template <Element T>
MemberData<T> receive_part(std::string_view op, const MeshArray<T>& a, const MeshGroup& g,
                           std::size_t p, const Device& here, Duration arrival,
                           const std::vector<Arrival>& verdicts, bool together, bool streams) {
  const DeviceArray<T>& own = a.shard(g.members[p]);
  const std::int64_t count = own.shape().numel();
  const auto n = static_cast<std::int64_t>(g.members.size());
  const SplitPart part = split_part(count, n, static_cast<std::int64_t>(p));
  MemberData<T> data;
  data.shape = Shape{part.size};
  data.at.resize(g.members.size());
  data.arrays.push_back(own);
  data.at[p] = {0, part.begin};
  for (std::size_t i = 0, k = 0; i < g.members.size(); ++i) {
    if (i == p) continue;
    if (together) {
      data.at[i] = {1, static_cast<std::int64_t>(k++) * part.size};
      continue;
    }
    const DeviceArray<T> flat = reshape(op, a.shard(g.members[i]), Shape{count});
    data.at[i] = {data.arrays.size(), 0};
    data.arrays.push_back(receive(op, slice(op, flat, 0, part.begin, part.begin + part.size),
                                  here, arrival, &verdicts[i], Buffer(), streams));
  }
  if (together && n > 1) {
    data.arrays.push_back(receive_together(op, a, g, p, verdicts, Shape{count}, 0, part.begin,
                                           part.size, here, arrival, streams));
  }
  return data;
}

/// One step of `here` that receives, back to back in group order, the reduced parts
/// `reduced[i]` (flat, each on its own member's device) of every position i but `p`, arriving
/// when `from[p]` says and failing as the first of the others' `from[i]` does: receive_together
/// for parts of different sizes. The parts land in the join's result (submit_receive).
template <Element T>
DeviceArray<T> receive_reduced(std::string_view op, const std::vector<DeviceArray<T>>& reduced,
                               std::size_t p, const std::vector<Arrival>& from,
                               const Device& here) {
  const std::shared_ptr<DeviceState>& to = DeviceAccess::state(here);
  InlineList<Step*, 16> inputs(reduced.size() - 1);
  std::int64_t count = 0;
  Arrival arrives{from[p].at, nullptr};
  for (std::size_t i = 0, k = 0; i < reduced.size(); ++i) {
    if (i == p) continue;
    Step& s = step_of(op, reduced[i]);
    inputs[k++] = &s;
    count += s.shape().numel();
    if (!arrives.failure && from[i].failure) arrives.failure = from[i].failure;
    drive_source(s, *to);
  }
  auto copy = [](const Step& st) {
    std::byte* out = st.out<std::byte>();
    for (std::size_t i = 0; i < st.input_count(); ++i) {
      const std::size_t bytes = st.input_step(i).output_bytes();
      if (bytes == 0) continue;  // an empty part may have no buffer
      std::memcpy(out, st.in<std::byte>(i), bytes);
      out += bytes;
    }
  };
  return ArrayAccess::wrap<T>(
      submit_receive(op, to, inputs.span(), dtype_of<T>, Shape{count}, Layout{}, copy, arrives,
                     nullptr, true));
}

/// Where the other members' reduced parts land, over processes, for a result like `own` on
/// `here`: one block the result's size, each remote part received straight into its place
/// (landing_part), so that the join copies only its own member's part. None in one process,
/// on a model-only device, or where the join is to take over `own`'s buffer (its result must
/// be in that buffer: a donation).
template <Element T>
std::shared_ptr<Buffer> landing_for(const DeviceArray<T>& own, const Device& here) {
  const Step& s = step_of("all_reduce", own);
  const std::shared_ptr<DeviceState>& dev = DeviceAccess::state(here);
  const auto bytes = static_cast<std::size_t>(s.shape().numel()) * sizeof(T);
  if (t_remote_scope == nullptr || dev->model_only() || bytes == 0 ||
      (own.layout() == Layout{} && donatable(s, dtype_of<T>, s.shape(), Layout{}))) {
    return nullptr;
  }
  return std::make_shared<Buffer>(Buffer::allocate(bytes, &dev->buffers(), "all_reduce"));
}

/// Part i of n (split_part) of `count` elements of T in `landing`; none without one.
template <Element T>
Buffer landing_part(const std::shared_ptr<Buffer>& landing, std::int64_t count, std::int64_t n,
                    std::size_t i) {
  if (!landing) return Buffer();
  const SplitPart part = split_part(count, n, static_cast<std::int64_t>(i));
  return Buffer::part_of(landing, static_cast<std::size_t>(part.begin) * sizeof(T),
                         static_cast<std::size_t>(part.size) * sizeof(T));
}

/// Member p's result of `shape`: the n reduced parts joined in group order, its own
/// (`reduced_own`, part p, `begin` elements in) where it lies and the others' from `others`
/// (receive_reduced's step, or one receive each, in group order), one step of its device with
/// concat_members' cost. `own`: its shard, whose buffer the result takes over when the
/// collective's handle is the last (the donation waits for every read submitted before). The
/// join takes it as an input whenever it could take it over (row-major in DRAM), donated or
/// not, so that its dependencies do not depend on who else holds the shard (a program's
/// replay holds its operands until the collective is made). `landing` (landing_for): where
/// the others' parts were received, which becomes the result's buffer unless the join takes
/// `own`'s over; the bytes already in their place are not copied again.
template <Element T>
DeviceArray<T> join_parts(std::string_view op, const DeviceArray<T>& reduced_own,
                          std::int64_t begin, const std::vector<DeviceArray<T>>& others,
                          const Shape& shape, const DeviceArray<T>& own,
                          std::shared_ptr<Buffer> landing = nullptr) {
  const bool donor = own.layout() == Layout{};
  const std::size_t first = donor ? 1 : 0;
  InlineList<Step*, 16> inputs(first + 1 + others.size());  // in place for a group's worth
  if (donor) inputs[0] = &step_of(op, own);  // written over (donated) or unread
  inputs[first] = &step_of(op, reduced_own);
  for (std::size_t i = 0; i < others.size(); ++i) inputs[first + 1 + i] = &step_of(op, others[i]);
  const std::shared_ptr<DeviceState>& dev = common_device(op, inputs.span());
  // The others' parts land in place (see concat_members): the step copies its own part only.
  const auto written = static_cast<double>(reduced_own.shape().numel() *
                                           static_cast<std::int64_t>(sizeof(T)));
  const auto split = static_cast<std::size_t>(begin) * sizeof(T);
  return launch<T>(
      dev, {StepKind::compute, op, {0, written, written}}, shape, inputs.span(),
      [first, split, landing = std::move(landing)](const Step& st) mutable {
        // The landing replaces the buffer run() gave the output (host memory only: the model
        // sees the same join). const_cast: the kernel is the step's own, running.
        if (landing && !st.donated())
          const_cast<Step&>(st).set_output(Buffer::part_of(landing, 0, landing->bytes()));
        landing.reset();  // a donated result does not keep it
        // The others' parts, back to back, are the result without its own part: their bytes
        // before `split` go first, the rest after its own part (unless they landed there).
        std::byte* out = st.out<std::byte>();
        const std::size_t mine = st.input_step(first).output_bytes();
        if (mine != 0) std::memcpy(out + split, st.in<std::byte>(first), mine);
        std::size_t at = 0;  // where the input at hand starts in the others' bytes
        for (std::size_t i = first + 1; i < st.input_count(); ++i) {
          const std::size_t size = st.input_step(i).output_bytes();
          if (size == 0) continue;  // an empty part may have no buffer
          const std::byte* in = st.in<std::byte>(i);
          const std::size_t head = at < split ? std::min(size, split - at) : 0;
          if (head != 0 && in != out + at) std::memcpy(out + at, in, head);
          std::byte* tail = out + at + head + mine;
          if (size > head && in + head != tail) std::memcpy(tail, in + head, size - head);
          at += size;
        }
      },
      LayoutRule::row_major, donor ? 1u : 0u);
}

/// all_reduce's results, member by member, for `a`'s groups `groups` (checked), as the top of
/// this file says; `a`'s handles go before any result is made, so that a given shard can hold
/// its member's result.
template <Numeric T>
std::vector<DeviceArray<T>> all_reduce_members(std::string_view name, MeshState& mesh,
                                               MeshArray<T> a,
                                               const std::vector<MeshGroup>& groups,
                                               ReduceOp op) {
  const auto size = static_cast<std::size_t>(a.size());
  // One record a member and one a group, not a list for each of their fields: each list is an
  // allocation and a release at every call, which a small all-reduce's fixed cost feels.
  struct Member {
    MemberData<T> parts;
    std::ptrdiff_t own = -1;  // whole shards: the array of `parts` that is its own
    DeviceArray<T> shard;     // in parts: its shard, for its result
    Duration arrival{};
    std::span<const ReductionStep> steps;  // in parts: its part's reductions (Placed's)
    std::vector<DeviceArray<T>> others;  // the all-gather's receives
    std::shared_ptr<Buffer> landing;     // over processes: landing_for
  };
  struct Group {
    bool in_parts = false;
    Placed placed;  // its members' reductions
  };
  std::vector<Member> at(size);
  std::vector<Group> group(groups.size());
  // Every member's receives come before any reduction: a result that takes over its member's
  // shard must follow every read of that shard (a donation waits for the readers submitted
  // before it only).
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const MeshGroup& g = groups[k];
    const auto inputs = inputs_of(a, g);
    const auto plan = mesh.plan(Collective::all_reduce, g.topology,
                                static_cast<std::int64_t>(g.members.size()),
                                bytes_of_shard(*inputs[0]));
    group[k].placed = place_on_links(mesh, *plan, g, inputs, name);
    const Placed& placed = group[k].placed;
    group[k].in_parts = reduces_in_parts(*plan);
    const bool together = batches(a, g);
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      Member& m = at[static_cast<std::size_t>(g.members[p])];
      const Device& here = mesh.devices[static_cast<std::size_t>(g.members[p])];
      m.arrival = placed.arrivals[p];
      if (group[k].in_parts) {
        m.steps = placed.reductions_of(p);
        m.parts = receive_part(name, a, g, p, here, placed.reduced[p], placed.verdicts, together,
                               !m.steps.empty());
        m.shard = a.shard(g.members[p]);
      } else {
        m.parts = receive_members(name, a, g, p, -1, here, m.arrival, placed.verdicts, together,
                                  false);
        m.own = static_cast<std::ptrdiff_t>(m.parts.at[p].array);
      }
    }
  }
  static_cast<void>(std::move(a).shards());
  std::vector<DeviceArray<T>> out(size);
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t p = 0; p < groups[k].members.size(); ++p) {
      const auto m = static_cast<std::size_t>(groups[k].members[p]);
      // Its part's reductions step by step (a ring's or a line's), the last this kernel.
      out[m] = group[k].in_parts ? reduce_members(name, std::move(at[m].parts), op, -1,
                                                  at[m].shard.shape().numel(), at[m].steps)
                                 : reduce_received(name, std::move(at[m].parts), op, at[m].own);
      at[m].parts = MemberData<T>{};  // its views and handles go now (see receive_part)
    }
  }
  // The all-gather of the reduced parts: every member's receives, then every join.
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!group[k].in_parts) continue;
    const MeshGroup& g = groups[k];
    std::vector<DeviceArray<T>> reduced;
    // In the model the reduced parts arrive when the plan's last message does, as on the
    // links, failing as their reductions' models already know they fail (an injected fault, a
    // part that never fits: foresee): settling the other members' reductions here would decide
    // their devices' schedules up to them, and work submitted after the call (the rest of a
    // backward) could no longer run beside the collective. A failed input reaches every member
    // through its own part's reduction, which reads every input.
    std::vector<Arrival> from;  // each position's: when the parts arrive there, how its fails
    reduced.reserve(g.members.size());
    from.reserve(g.members.size());
    for (std::int64_t member : g.members) {
      const auto m = static_cast<std::size_t>(member);
      reduced.push_back(out[m]);
      const Step& s = step_of(name, out[m]);
      from.push_back({at[m].arrival, s.device()->foresee(s)});
    }
    const bool together = receives_batched();
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      const auto m = static_cast<std::size_t>(g.members[p]);
      const Device& here = mesh.devices[m];
      at[m].others.reserve(together ? 1 : g.members.size() - 1);
      if (together) {
        at[m].others.push_back(receive_reduced(name, reduced, p, from, here));
        continue;
      }
      at[m].landing = landing_for(at[m].shard, here);
      const std::int64_t count = at[m].shard.shape().numel();
      const auto n = static_cast<std::int64_t>(g.members.size());
      for (std::size_t i = 0; i < g.members.size(); ++i) {
        if (i == p) continue;
        const Arrival part{at[m].arrival, from[i].failure};
        at[m].others.push_back(receive(name, reduced[i], here, part.at, &part,
                                       landing_part<T>(at[m].landing, count, n, i), true));
      }
    }
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!group[k].in_parts) continue;
    const MeshGroup& g = groups[k];
    const auto n = static_cast<std::int64_t>(g.members.size());
    for (std::size_t p = 0; p < g.members.size(); ++p) {
      const auto m = static_cast<std::size_t>(g.members[p]);
      const Shape shape = at[m].shard.shape();
      const SplitPart part = split_part(shape.numel(), n, static_cast<std::int64_t>(p));
      out[m] = join_parts(name, out[m], part.begin, at[m].others, shape, at[m].shard,
                          std::move(at[m].landing));
      at[m].others.clear();
      at[m].shard = DeviceArray<T>{};
    }
  }
  return out;
}

}  // namespace ferry::detail
