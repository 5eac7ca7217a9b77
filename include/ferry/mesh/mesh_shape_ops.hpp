#pragma once
// reshape and transpose of placed mesh arrays: per device, a Shard following its dim (through a
// split or a merge when each device's block stays whole entries of the new dim).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh_op_support.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/ops/reshape.hpp"

namespace ferry {

namespace detail {

/// Where a reshape of a placed array takes its placements: those of the result, and the mesh
/// axes whose Shard cannot follow (none when the reshape runs shard by shard).
struct ReshapePlan {
  Placements placements;
  std::vector<std::size_t> bad_axes;
};

/// The placements of an array of shape `global`, placed by `ps` (normalized) on a mesh of
/// shape `mesh`, reshaped to `to` of the same element count. The dims fall into the smallest groups
/// of consecutive dims of equal products (a merge, a split, or a dim kept as it is). A Shard of a
/// dim follows it into its group's result when each device's block of the dim, in the group's
/// row-major order, is a run of whole entries of one result dim, cut as array_split cuts that dim:
/// the dim must be its group's first of size above 1 (or a merge would interleave the devices'
/// blocks) and each block times the sizes after it a multiple of the sizes after the result
/// dim. [B, S, H * D] Shard(2) into [B, S, H, D] is Shard(2) when H divides by the devices
/// (whole heads each); merging [H, D] Shard(0) into [H * D] likewise. A group with two sharded
/// dims keeps the first (its axis checked as above) and refuses the others. Partial and
/// Replicate pass unchanged.
inline ReshapePlan reshape_plan(const Shape& global, const Shape& to, const Placements& ps,
                                const MeshShape& mesh) {
  ReshapePlan plan{ps, {}};
  const auto& in = global.dims();
  const auto& out = to.dims();
  if (global.numel() == 0) {
    // No element to place: a Shard follows only a dim kept at its place and size.
    for (std::size_t x = 0; x < ps.size(); ++x) {
      if (const auto* s = std::get_if<Shard>(&ps[x])) {
        const auto d = static_cast<std::size_t>(s->dim);
        if (d >= out.size() || out[d] != in[d]) plan.bad_axes.push_back(x);
      }
    }
    return plan;
  }
  // The mesh axis that shards each input dim (-1: none).
  std::vector<int> axis_of(in.size(), -1);
  for (std::size_t x = 0; x < ps.size(); ++x) {
    if (const auto* s = std::get_if<Shard>(&ps[x])) {
      axis_of[static_cast<std::size_t>(s->dim)] = static_cast<int>(x);
    }
  }
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < in.size() || j < out.size()) {
    const std::size_t i0 = i;
    const std::size_t j0 = j;
    std::int64_t pin = i < in.size() ? in[i++] : 1;
    std::int64_t pout = j < out.size() ? out[j++] : 1;
    while (pin != pout) {  // equal totals, all sizes positive: neither side runs out first
      if (pin < pout) {
        pin *= in[i++];
      } else {
        pout *= out[j++];
      }
    }
    // Input dims [i0, i), result dims [j0, j): one group.
    bool kept = false;  // a Shard of this group already followed
    for (std::size_t d = i0; d < i; ++d) {
      if (axis_of[d] < 0) continue;
      const auto x = static_cast<std::size_t>(axis_of[d]);
      std::int64_t before = 1;
      for (std::size_t k = i0; k < d; ++k) before *= in[k];
      std::int64_t after = 1;
      for (std::size_t k = d + 1; k < i; ++k) after *= in[k];
      const std::int64_t n = mesh.sizes()[x];
      std::optional<std::size_t> lands;
      // One device along the axis holds all of every dim: any dim of the group's result will do.
      if (n == 1 && !kept && j > j0) lands = j0;
      for (std::size_t e = j0; !kept && !lands && e < j; ++e) {
        std::int64_t out_before = 1;
        for (std::size_t k = j0; k < e; ++k) out_before *= out[k];
        std::int64_t out_after = 1;
        for (std::size_t k = e + 1; k < j; ++k) out_after *= out[k];
        if (out_before != before) continue;
        bool fits = true;
        for (std::int64_t p = 0; fits && p < n; ++p) {
          const SplitPart part = split_part(in[d], n, p);
          const SplitPart want = split_part(out[e], n, p);
          fits = (part.begin * after) % out_after == 0 && (part.size * after) % out_after == 0 &&
                 part.begin * after / out_after == want.begin &&
                 part.size * after / out_after == want.size;
        }
        if (fits) lands = e;
      }
      if (lands) {
        plan.placements[x] = Shard{static_cast<int>(*lands)};
        kept = true;
      } else {
        plan.bad_axes.push_back(x);
      }
    }
  }
  std::sort(plan.bad_axes.begin(), plan.bad_axes.end());
  return plan;
}

}  // namespace detail

// ---- shape ops ----

/// `a` reshaped to `shape` (fully given, no -1) on each device, when it runs shard by shard:
/// each Shard's dim must reach the result whole-entry-wise (detail::reshape_plan): a dim kept
/// at its size, split into (heads, head_dim) when the heads divide by the devices, or merged
/// from a sharded first dim whose blocks stay whole. A Shard moves to its dim's place in the
/// result; Replicate and Partial stay. Throws InvalidArgument for an empty or unplaced array,
/// ShapeError when the element counts differ, PlacementError when a Shard cannot follow (naming
/// both placements, the mesh axes and the redistribute that replicates them).
template <Element T>
MeshArray<T> reshape(const MeshArray<T>& a, const Shape& shape) {
  constexpr std::string_view op = "reshape";
  detail::check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  if (global.numel() != shape.numel()) {
    detail::fail<ShapeError>(op, "cannot reshape a global ", global, " into ", shape);
  }
  const Mesh mesh = a.mesh();
  const Placements& ps = a.placements();
  const detail::ReshapePlan plan = detail::reshape_plan(global, shape, ps, mesh.shape());
  if (!plan.bad_axes.empty()) {
    Placements fix = ps;
    std::string what;
    for (std::size_t k = 0; k < plan.bad_axes.size(); ++k) {
      const std::size_t x = plan.bad_axes[k];
      const int d = std::get<Shard>(ps[x]).dim;
      what += (k > 0 ? "; " : "") + detail::placement_text(ps[x]) + " on mesh axis " +
              std::to_string(x) + " cuts dim " + std::to_string(d) + " (" +
              std::to_string(global.dims()[static_cast<std::size_t>(d)]) + ") into " +
              std::to_string(mesh.shape().sizes()[x]) + " blocks";
      fix[x] = Replicate{};
    }
    detail::fail<PlacementError>(
        op, "a global ", global, " placed ", detail::placements_text(ps), " cannot become ",
        shape, " shard by shard: ", what,
        ", which do not land on whole entries of one dim of the result as array_split cuts it; "
        "call redistribute(a, ",
        detail::placements_text(fix), ") first");
  }
  std::vector<DeviceArray<T>> shards;
  shards.reserve(static_cast<std::size_t>(a.size()));
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const detail::Block block =
        detail::block_of(shape, plan.placements, mesh.shape(), mesh.shape().coordinate_of(i));
    shards.push_back(ferry::reshape(a.shard(i), block.shape()));
  }
  return detail::placed_like(a, std::move(shards), shape, plan.placements);
}

/// `a` with its dims reordered (dim i of the result is dim axes[i] of `a`; negative from the
/// end) on each device, as np.transpose(a, axes): a Shard follows its dim. (Not `permute`:
/// on mesh arrays that name is the collective that moves shards between devices.) Throws
/// InvalidArgument for an empty or unplaced array or `axes` that are not a permutation of the
/// dims.
template <Element T>
MeshArray<T> transpose(const MeshArray<T>& a, const std::vector<int>& axes) {
  constexpr std::string_view op = "transpose";
  detail::check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  const auto rank = static_cast<int>(global.rank());
  std::vector<int> where(global.rank(), -1);  // where[d]: the result's dim holding dim d
  bool ok = axes.size() == global.rank();
  for (std::size_t i = 0; ok && i < axes.size(); ++i) {
    const int ax = axes[i];
    ok = ax >= -rank && ax < rank;
    if (!ok) break;
    const auto d = static_cast<std::size_t>(ax < 0 ? ax + rank : ax);
    ok = where[d] < 0;
    where[d] = static_cast<int>(i);
  }
  if (!ok) {
    std::string text = "(";
    for (std::size_t i = 0; i < axes.size(); ++i) {
      text += (i > 0 ? ", " : "") + std::to_string(axes[i]);
    }
    detail::fail<InvalidArgument>(op, "axes ", text, ") are not a permutation of the ", rank,
                                  " dims of a global ", global);
  }
  std::vector<std::int64_t> dims(global.rank());
  for (std::size_t d = 0; d < global.rank(); ++d) {
    dims[static_cast<std::size_t>(where[d])] = global.dims()[d];
  }
  Placements ps = a.placements();
  for (auto& p : ps) {
    if (auto* s = std::get_if<Shard>(&p)) s->dim = where[static_cast<std::size_t>(s->dim)];
  }
  return detail::placed_like(
      a, detail::each_shard(a, [&](const DeviceArray<T>& s) { return ferry::permute(s, axes); }),
      Shape(std::span<const std::int64_t>(dims.data(), dims.size())), std::move(ps));
}

/// `a` with its dims reversed (ferry::transpose), a Shard following its dim; throws like
/// transpose(a, axes).
template <Element T>
MeshArray<T> transpose(const MeshArray<T>& a) {
  detail::check_placed("transpose", a, "the array");
  std::vector<int> axes;
  for (auto d = static_cast<int>(a.global_shape().rank()); d-- > 0;) axes.push_back(d);
  return transpose(a, axes);
}

}  // namespace ferry
