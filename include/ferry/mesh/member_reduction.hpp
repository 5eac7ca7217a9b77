#pragma once
// ReduceOp, and how one member reduces the members' data it holds (in group order, over a new
// leading axis, bit for bit as ferry::sum, max, min or mean of the data stacked): what
// all_reduce, reduce_scatter (mesh/collectives.hpp and mesh/all_reduce_parts.hpp) and
// distribute's partial sums (mesh/distribute.hpp) share.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/inline_list.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/reduce.hpp"
#include "ferry/mesh/collective_donation.hpp"
#include "ferry/mesh/collective_support.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/stack.hpp"

namespace ferry {

namespace detail {

/// The kernel op that reduces as `how` does (checked reducible before).
constexpr kernels::ReduceOp kernel_reduce_op(ReduceOp how) noexcept {
  switch (how) {
    case ReduceOp::max: return kernels::ReduceOp::max;
    case ReduceOp::min: return kernels::ReduceOp::min;
    case ReduceOp::mean: return kernels::ReduceOp::mean;
    case ReduceOp::sum: break;
  }
  return kernels::ReduceOp::sum;
}

/// The model's commands for the reductions `steps` of a member of a ring or line
/// reduce-scatter on `here` (LinkModel::run placed them on the links), each after the one
/// before: per step, a kernel of step_reduction_cost that waits for the step's messages
/// (ReductionStep::arrival, the way a transfer waits for its data) and reads the previous
/// partial. Returns the last. They compute nothing: the values come from one fold of every
/// member's data in group order (reduce_members), as bit-identical results need. In the model
/// each holds its step's bytes (StepInfo::model_bytes; the host allocates nothing), the
/// partial it writes, until the next step's reduction has read it: the ring's staging, two
/// chunks while a reduction runs (what it reduces into and what it passes on), one between.
/// So the chip's reduction work falls where a ring's does, step by step as the data arrives,
/// sharing the chip's units and DRAM with the kernels beside it, and so does its memory.
template <Element T>
DeviceArray<T> partial_reductions(std::string_view op, const Device& here,
                                  std::span<const ReductionStep> steps) {
  const std::shared_ptr<DeviceState>& dev = DeviceAccess::state(here);
  DeviceArray<T> partial;
  for (const ReductionStep& r : steps) {
    Step* before[] = {partial.valid() ? &step_of(op, partial) : nullptr};
    StepInfo info{StepKind::compute, op, step_reduction_cost<T>(r.bytes)};
    info.model_bytes = r.bytes;
    const Arrival arrival{r.arrival, nullptr};
    partial = ArrayAccess::wrap<T>(
        submit_step(dev, std::move(info), dtype_of<T>, Shape{0},
                    std::span<Step* const>(before, partial.valid() ? 1 : 0), [](const Step&) {},
                    &arrival));
  }
  return partial;
}

/// The reduction of the members' data `data` (all on one device, in group order) over a new
/// leading axis. One step folds the parts where they lie (kernels::reduce_parts: the bits of
/// ferry::sum, max, min or mean of the parts stacked), so the device holds the parts and the
/// result, never a stacked copy; and when `own` names an array whose handle here is its last
/// (the caller gave the collective its shard), the result takes over that array's buffer
/// (donation, as the ops do: never a buffer another handle or a view still reads). Not under a
/// gradient tape or a program trace (see the overload on parts). `whole` (-1: the data's own
/// count): the elements of each member's data when `data` is a piece of it (all_reduce's
/// reduce-scatter), whose bits are then those of the whole's reduction. `steps`: the
/// member's reductions of a ring or line as the links placed them (Placed::reductions_of), of
/// which the model then runs one command each (partial_reductions): the step itself is the
/// last, and costs that step's reduction; without them it costs the fold of all n. Throws as
/// check_reducible for an op that cannot reduce T's.
template <Element T>
DeviceArray<T> reduce_members(std::string_view op, MemberData<T> data, ReduceOp how,
                              std::ptrdiff_t own = -1, std::int64_t whole = -1,
                              std::span<const ReductionStep> steps = {}) {
  check_reducible<T>(op, how);
  // The donor first: launch() donates only a given input, and its bit mask has 32 of them
  // where a mesh may have more members. The others follow in order: array k is input k + 1
  // before the donor, input k after it.
  const std::size_t arrays = data.arrays.size();
  const std::size_t first = own >= 0 ? static_cast<std::size_t>(own) : 0;
  const auto input_of = [first](std::size_t k) { return k == first ? 0 : k < first ? k + 1 : k; };
  // The partials before the last step's: an input the kernel does not read.
  const DeviceArray<T> before =
      steps.size() > 1 ? partial_reductions<T>(op, data.arrays[0].device(),
                                               steps.first(steps.size() - 1))
                       : DeviceArray<T>();
  InlineList<Step*, 16> inputs(arrays + (before.valid() ? 1 : 0));
  inputs[0] = &step_of(op, data.arrays[first]);
  for (std::size_t k = 0; k < arrays; ++k) {
    if (k != first) inputs[input_of(k)] = &step_of(op, data.arrays[k]);
  }
  if (before.valid()) inputs[arrays] = &step_of(op, before);
  const std::shared_ptr<DeviceState>& dev = common_device(op, inputs.span());
  const std::size_t n = data.at.size();
  const auto count = data.shape.numel();
  const auto elements = static_cast<double>(count);
  const Cost cost = !steps.empty()
                        ? step_reduction_cost<T>(steps.back().bytes)
                        : reduction_cost(elements * static_cast<double>(n),
                                         elements * static_cast<double>(n * sizeof(T)),
                                         elements * static_cast<double>(sizeof(T)));
  const kernels::ReduceOp k = kernel_reduce_op(how);
  return launch<T>(
      dev, {StepKind::compute, op, cost}, data.shape, inputs.span(),
      // The kernel keeps where each member's data lies (data.at, no copy of it).
      [at = std::move(data.at), input_of, count, k, whole](const Step& st) {
        if (count == 0) return;  // an empty piece's data may have no buffer to offset into
        InlineList<const T*, 8> ptrs(at.size());  // in place for a group's worth
        for (std::size_t i = 0; i < at.size(); ++i)
          ptrs[i] = st.in<T>(input_of(at[i].array)) + at[i].offset;
        kernels::reduce_parts<T>(ptrs.span(), st.out<T>(), count, k, st.runner(), whole);
      },
      LayoutRule::row_major, own >= 0 ? 1u : 0u);
}

/// The reduction of `parts` (one per member, in group order, all on one device) over a new
/// leading axis, as the overload on MemberData (`own` a position in `parts`, `steps` as
/// there). Under a program
/// trace, or a gradient tape the collective did not hide (by max or min:
/// mesh/collective_tape.hpp), it is the ops themselves (a stack, then the reduction), so that
/// they record their replay and their gradients.
template <Element T>
DeviceArray<T> reduce_members(std::string_view op, std::vector<DeviceArray<T>> parts, ReduceOp how,
                              std::ptrdiff_t own = -1, std::span<const ReductionStep> steps = {}) {
  check_reducible<T>(op, how);
  if (t_tape != nullptr || t_recorder != nullptr) {
    const DeviceArray<T> stacked = ferry::stack(parts, 0);
    if (how == ReduceOp::max) return ferry::max(stacked, {0});
    if (how == ReduceOp::min) return ferry::min(stacked, {0});
    if constexpr (Floating<T>) {
      if (how == ReduceOp::mean) return ferry::mean(stacked, {0});
    }
    return ferry::sum(stacked, {0});  // checked above: what is left is sum
  }
  return reduce_members(op, as_member_data(std::move(parts)), how, own, -1, steps);
}

/// reduce_members of what receive_members gave: on the batched path the overload on
/// MemberData, else the one on parts (which keeps the tape's and the trace's path).
template <Element T>
DeviceArray<T> reduce_received(std::string_view op, MemberData<T> data, ReduceOp how,
                               std::ptrdiff_t own = -1, std::span<const ReductionStep> steps = {}) {
  if (!receives_batched() && (t_tape != nullptr || t_recorder != nullptr)) {
    // Moved out: a given shard's handle here must be its last for the result to take it over.
    std::vector<DeviceArray<T>> parts(std::make_move_iterator(data.arrays.begin()),
                                      std::make_move_iterator(data.arrays.end()));
    return reduce_members(op, std::move(parts), how, own, steps);
  }
  // Unbatched (over processes) with nothing recording, `data` is as_member_data of its arrays:
  // the overload on parts would make the same of them again.
  return reduce_members(op, std::move(data), how, own, -1, steps);
}

}  // namespace detail

}  // namespace ferry
