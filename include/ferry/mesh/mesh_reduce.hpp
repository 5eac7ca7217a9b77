#pragma once
// Reductions, softmax and the norms on placed mesh arrays: a sum over a sharded dim gives
// Partial(sum) (max Partial(max), min Partial(min)); softmax and the norms need their dims whole.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/kernels/convert.hpp"
#include "ferry/mesh/mesh_op_support.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/ops/creation.hpp"
#include "ferry/ops/normalization.hpp"
#include "ferry/ops/reduce.hpp"
#include "ferry/ops/softmax.hpp"

namespace ferry {

/// The weight and bias (empty handles when absent, else 1-D of x's last size, Replicate on
/// every mesh axis of x's mesh) and the epsilon of a layer_norm or rms_norm of a mesh array.
template <Floating T>
struct MeshNormOptions {
  MeshArray<T> weight{};
  MeshArray<T> bias{};
  double eps = 1e-5;
};

namespace detail {

inline std::vector<bool> axis_flags(std::string_view op, const std::vector<int>& axes,
                                    std::size_t rank) {
  std::vector<bool> flags(rank, axes.empty());
  const auto r = static_cast<int>(rank);
  for (int ax : axes) {
    if (ax < -r || ax >= r) {
      fail<InvalidArgument>(op, "axis ", ax, " is out of range for a global array of rank ", r);
    }
    const auto d = static_cast<std::size_t>(ax < 0 ? ax + r : ax);
    if (flags[d]) fail<InvalidArgument>(op, "axis ", ax, " is given twice");
    flags[d] = true;
  }
  return flags;
}

/// The identity of max (-inf, or the lowest value) or min (+inf, or the highest) when shard `s`
/// has an empty block of a reduced dim `axes` names that `global` does not have empty.
template <Numeric T>
std::optional<T> empty_block_identity(const DeviceArray<T>& s, const std::vector<int>& axes,
                                      const Shape& global, ReduceOp r) {
  bool empty = false;
  for (const int d : axes) {
    const auto i = static_cast<std::size_t>(d);
    if (global.dims()[i] == 0) return std::nullopt;
    empty = empty || s.shape().dims()[i] == 0;
  }
  if (!empty) return std::nullopt;
  using Limits = std::numeric_limits<T>;
  if constexpr (Limits::has_infinity) {
    // Through the compute type: bfloat16 and float16 have no unary minus of their own.
    const auto inf = static_cast<kernels::compute_t<T>>(Limits::infinity());
    return static_cast<T>(r == ReduceOp::max ? -inf : inf);
  } else {
    return r == ReduceOp::max ? Limits::lowest() : Limits::max();
  }
}

/// A reduction by `r` over `axes`: local reductions, a sharded reduced dim becoming
/// Partial(`r`) (a mean: Partial(sum) of local sums over the global count).
template <Numeric T>
MeshArray<T> mesh_reduce(std::string_view op, ReduceOp r, const MeshArray<T>& a,
                         const std::vector<int>& axes, bool keepdims) {
  check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  const std::vector<bool> flags = axis_flags(op, axes, global.rank());
  // new_dim[d]: where dim d lands in the result.
  std::vector<int> new_dim(global.rank(), 0);
  std::vector<std::int64_t> out_dims;
  std::vector<int> local_axes;
  std::int64_t count = 1;
  for (std::size_t d = 0; d < global.rank(); ++d) {
    new_dim[d] = static_cast<int>(out_dims.size());
    if (flags[d]) {
      local_axes.push_back(static_cast<int>(d));
      count *= global.dims()[d];
      if (keepdims) out_dims.push_back(1);
    } else {
      out_dims.push_back(global.dims()[d]);
    }
  }
  const ReduceOp part_op = r == ReduceOp::mean ? ReduceOp::sum : r;
  Placements ps = a.placements();
  bool sharded = false;
  for (std::size_t x = 0; x < ps.size(); ++x) {
    if (const auto* s = std::get_if<Shard>(&ps[x])) {
      const auto d = static_cast<std::size_t>(s->dim);
      if (flags[d]) {
        ps[x] = Partial{part_op};
        sharded = true;
      } else {
        ps[x] = Shard{new_dim[d]};
      }
    } else if (const auto* p = std::get_if<Partial>(&ps[x]); p != nullptr && p->op != part_op) {
      fail<PlacementError>(op, "the array is ", placement_text(ps[x]), " on mesh axis ", x,
                           " (placements ", placements_text(a.placements()), "), and ", op,
                           " of the parts is not ", op, " of their ", reduce_op_text(p->op),
                           "; call redistribute(a, ",
                           placements_text(reduced_placements(a.placements())), ") first");
    }
  }
  const Shape out(std::span<const std::int64_t>(out_dims.data(), out_dims.size()));
  std::array<bool, kMaxRank> reduced{};
  std::copy(flags.begin(), flags.end(), reduced.begin());
  auto local = [&](const DeviceArray<T>& s) -> DeviceArray<T> {
    if (r == ReduceOp::max || r == ReduceOp::min) {
      // A device whose block of a sharded reduced dim is empty (array_split's last ones) holds
      // the identity of its Partial; a global dim that is empty still throws, as on one device.
      if (const auto identity = empty_block_identity(s, local_axes, global, r)) {
        return detail::full<T>(op, s.device(), reduced_shape(s.shape(), reduced, keepdims),
                               *identity);
      }
      return r == ReduceOp::max ? ferry::max(s, local_axes, keepdims)
                                : ferry::min(s, local_axes, keepdims);
    }
    if constexpr (Floating<T>) {
      if (r == ReduceOp::mean) {
        if (!sharded) return ferry::mean(s, local_axes, keepdims);
        return ferry::divide(ferry::sum(s, local_axes, keepdims), static_cast<T>(count));
      }
    }
    // Sum: a mean comes from ferry::mean alone, whose T is floating.
    return ferry::sum(s, local_axes, keepdims);
  };
  if (local_axes.empty()) return a;  // a reduction over no dims of an empty-rank array
  return placed_like(a, each_shard(a, local), out, std::move(ps));
}

/// Throws PlacementError, as `op`, when dim `d` of `a` is sharded or `a` has a Partial axis:
/// the op needs the whole of that dim and the reduced values on every device.
template <Element T>
void check_whole_dim(std::string_view op, const MeshArray<T>& a, std::size_t d,
                     std::string_view what) {
  const Placements& ps = a.placements();
  for (std::size_t x = 0; x < ps.size(); ++x) {
    if (const auto* s = std::get_if<Shard>(&ps[x]);
        s != nullptr && static_cast<std::size_t>(s->dim) == d) {
      fail<PlacementError>(op, what, " ", d, " is sharded along mesh axis ", x, " (placements ",
                           placements_text(ps), "); call redistribute(a, ",
                           placements_text(with_axis(ps, x, Replicate{})),
                           ") or shard another dim first");
    }
    if (is_partial(ps[x])) {
      fail<PlacementError>(op, "the array is ", placement_text(ps[x]), " on mesh axis ", x,
                           " (placements ", placements_text(ps), "); call redistribute(a, ",
                           placements_text(reduced_placements(ps)), ") first");
    }
  }
}

template <Floating T>
MeshArray<T> mesh_norm(std::string_view op, const MeshArray<T>& x, const MeshNormOptions<T>& o,
                       bool centered) {
  check_placed(op, x, "x");
  const Shape& global = x.global_shape();
  if (global.rank() == 0) fail<ShapeError>(op, "needs an array of rank >= 1, got a scalar");
  check_whole_dim(op, x, global.rank() - 1, "the normalized last dim");
  const std::int64_t last = global.dims()[global.rank() - 1];
  for (const MeshArray<T>* p : {&o.weight, &o.bias}) {
    if (!p->valid()) continue;
    const std::string_view what = p == &o.weight ? "weight" : "bias";
    check_placed(op, *p, what);
    check_same_mesh(op, x, *p);
    if (p->global_shape().rank() != 1 || p->global_shape().dims()[0] != last) {
      fail<ShapeError>(op, what, " must have the shape (", last, ") of x's last axis, got ",
                       p->global_shape(), " for x of ", global);
    }
    for (const auto& pl : p->placements()) {
      if (!std::holds_alternative<Replicate>(pl)) {
        const Placements want(p->placements().size(), Replicate{});
        fail<PlacementError>(op, what, " is placed ", placements_text(p->placements()),
                             "; it must be Replicate on every mesh axis: call redistribute(", what,
                             ", ", placements_text(want), ") first");
      }
    }
  }
  std::vector<DeviceArray<T>> out;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    NormOptions<T> local;
    if (o.weight.valid()) local.weight = o.weight.shard(i);
    if (o.bias.valid()) local.bias = o.bias.shard(i);
    local.eps = o.eps;
    out.push_back(centered ? ferry::layer_norm(x.shard(i), local)
                           : ferry::rms_norm(x.shard(i), local));
  }
  return placed_like(x, std::move(out), global, x.placements());
}

}  // namespace detail

// ---- reductions ----

/// The sum over `axes` (negative from the end; empty: every dim), keeping them as size 1 when
/// `keepdims`. Each device sums its shard; a reduced dim sharded along mesh axis x makes axis x
/// Partial(sum); other Shards follow their dim to its new number; Replicate stays; a
/// Partial(sum) stays. Throws InvalidArgument for an empty or unplaced array or a bad axis,
/// PlacementError for a Partial other than sum.
template <Numeric T>
MeshArray<T> sum(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("sum", ReduceOp::sum, a, axes, keepdims);
}
/// The mean over `axes`; as sum, a sharded reduced dim giving Partial(sum) of each device's
/// sum divided by the global count (where no reduced dim is sharded, each device's mean).
template <Floating T>
MeshArray<T> mean(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("mean", ReduceOp::mean, a, axes, keepdims);
}
/// The maximum over `axes`; as sum, giving Partial(max), and passing Partial(max) only.
template <Numeric T>
MeshArray<T> max(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("max", ReduceOp::max, a, axes, keepdims);
}
/// The minimum over `axes`; as sum, giving Partial(min), and passing Partial(min) only.
template <Numeric T>
MeshArray<T> min(const MeshArray<T>& a, const std::vector<int>& axes = {}, bool keepdims = false) {
  return detail::mesh_reduce("min", ReduceOp::min, a, axes, keepdims);
}

// ---- softmax and norms ----

/// softmax over `axis` on each device, placements kept. Throws InvalidArgument for an empty or
/// unplaced array or an axis out of range, PlacementError when `axis` is sharded or the array
/// has a Partial axis.
template <Floating T>
MeshArray<T> softmax(const MeshArray<T>& a, int axis) {
  constexpr std::string_view op = "softmax";
  detail::check_placed(op, a, "the array");
  const auto rank = static_cast<int>(a.global_shape().rank());
  if (axis < -rank || axis >= rank) {
    detail::fail<InvalidArgument>(op, "axis ", axis, " is out of range for a global array of rank ",
                                  rank);
  }
  detail::check_whole_dim(op, a, static_cast<std::size_t>(axis < 0 ? axis + rank : axis), "axis");
  return detail::placed_like(
      a, detail::each_shard(a, [&](const DeviceArray<T>& s) { return ferry::softmax(s, axis); }),
      a.global_shape(), a.placements());
}

/// layer_norm over the last dim on each device, placements kept; `options`' weight and bias
/// are Replicate mesh arrays of x's mesh. Throws InvalidArgument for an empty or unplaced
/// array or a weight or bias of another mesh, ShapeError for a scalar x or a weight or bias not
/// of x's last size, PlacementError when the last dim is sharded, x has a Partial axis, or a
/// weight or bias is not Replicate everywhere; and what ferry::layer_norm throws.
template <Floating T>
MeshArray<T> layer_norm(const MeshArray<T>& x, const MeshNormOptions<T>& options = {}) {
  return detail::mesh_norm("layer_norm", x, options, true);
}
/// rms_norm over the last dim on each device; as layer_norm.
template <Floating T>
MeshArray<T> rms_norm(const MeshArray<T>& x, const MeshNormOptions<T>& options = {}) {
  return detail::mesh_norm("rms_norm", x, options, false);
}

}  // namespace ferry
