#pragma once
// reshape and transpose of placed mesh arrays: per device, a Shard following its dim.

#include <cstddef>
#include <cstdint>
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

// ---- shape ops ----

/// `a` reshaped to `shape` (fully given, no -1) on each device. Allowed when every dim up to
/// and including the last sharded one keeps its size and place (the dims after it may be
/// reshaped freely); Shard dims keep their numbers, Replicate and Partial stay. Throws
/// InvalidArgument for an empty or unplaced array, ShapeError when the element counts differ,
/// PlacementError when the reshape touches a sharded dim or one before it.
template <Element T>
MeshArray<T> reshape(const MeshArray<T>& a, const Shape& shape) {
  constexpr std::string_view op = "reshape";
  detail::check_placed(op, a, "the array");
  const Shape& global = a.global_shape();
  if (global.numel() != shape.numel()) {
    detail::fail<ShapeError>(op, "cannot reshape a global ", global, " into ", shape);
  }
  const Placements& ps = a.placements();
  std::size_t keep = 0;  // dims [0, keep) must stay
  for (const auto& p : ps) {
    if (const auto* s = std::get_if<Shard>(&p)) {
      keep = std::max(keep, static_cast<std::size_t>(s->dim) + 1);
    }
  }
  bool ok = shape.rank() >= keep;
  for (std::size_t d = 0; ok && d < keep; ++d) ok = shape.dims()[d] == global.dims()[d];
  if (!ok) {
    detail::fail<PlacementError>(
        op, "reshaping a global ", global, " into ", shape, " changes dims up to ", keep - 1,
        ", which placements ", detail::placements_text(ps), " shard; call redistribute(a, ",
        detail::placements_text(std::vector<Placement>(ps.size(), Replicate{})),
        ") first, or keep the sharded dims and those before them");
  }
  return detail::placed_like(
      a,
      detail::each_shard(a,
                         [&](const DeviceArray<T>& s) {
                           std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
                           for (std::size_t d = 0; d < keep; ++d) dims[d] = s.shape().dims()[d];
                           return ferry::reshape(
                               s, Shape(std::span<const std::int64_t>(dims.data(), dims.size())));
                         }),
      shape, ps);
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
