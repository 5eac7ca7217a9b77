#pragma once
// matmul of placed mesh arrays, for the cases of Megatron's layers: Shard{1} weights
// (column-parallel, no communication), Shard{-1} activations x Shard{0} weights (row-parallel,
// a Partial(sum) result).

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
#include "ferry/ops/matmul.hpp"

namespace ferry {

// ---- matmul ----

/// a @ w on each device, for Megatron's layers: `a` of rank >= 2 (activations, its last dim
/// contracted), `w` of rank 2 (k, n). Mesh axis by mesh axis: Replicate x Replicate gives
/// Replicate; a Shard of a dim of `a` before its last x Replicate keeps that Shard (batch or
/// rows); Replicate x Shard(1) gives Shard(-1) (column-parallel); Shard(-1) x Shard(0) gives
/// Partial(sum) (row-parallel); Partial(sum) x Replicate and Replicate x Partial(sum) give
/// Partial(sum). Throws InvalidArgument for an empty or unplaced operand or two meshes,
/// ShapeError for ranks outside these or inner sizes that differ, PlacementError for any
/// other pair of placements (naming both and the redistribute that makes the call work).
template <Numeric T>
MeshArray<T> matmul(const MeshArray<T>& a, const MeshArray<T>& w) {
  constexpr std::string_view op = "matmul";
  detail::check_placed(op, a, "a");
  detail::check_placed(op, w, "w");
  detail::check_same_mesh(op, a, w);
  const Shape& ga = a.global_shape();
  const Shape& gw = w.global_shape();
  if (ga.rank() < 2 || gw.rank() != 2) {
    detail::fail<ShapeError>(op, "a mesh matmul takes a of rank >= 2 and w of rank 2, got ", ga,
                             " x ", gw);
  }
  const std::size_t r = ga.rank();
  if (ga.dims()[r - 1] != gw.dims()[0]) {
    detail::fail<ShapeError>(op, "inner sizes differ: ", ga, " x ", gw);
  }
  const Placements& pa = a.placements();
  const Placements& pw = w.placements();
  Placements out(pa.size());
  const auto last = static_cast<int>(r - 1);
  for (std::size_t x = 0; x < pa.size(); ++x) {
    const auto* sa = std::get_if<Shard>(&pa[x]);
    const auto* sw = std::get_if<Shard>(&pw[x]);
    const auto* qa = std::get_if<Partial>(&pa[x]);
    const auto* qw = std::get_if<Partial>(&pw[x]);
    const bool ra = std::holds_alternative<Replicate>(pa[x]);
    const bool rw = std::holds_alternative<Replicate>(pw[x]);
    if (ra && rw) {
      out[x] = Replicate{};
    } else if (sa != nullptr && sa->dim < last && rw) {
      out[x] = *sa;
    } else if (ra && sw != nullptr && sw->dim == 1) {
      out[x] = Shard{last};
    } else if (sa != nullptr && sa->dim == last && sw != nullptr && sw->dim == 0) {
      out[x] = Partial{};
    } else if ((qa != nullptr && qa->op == ReduceOp::sum && rw) ||
               (ra && qw != nullptr && qw->op == ReduceOp::sum)) {
      out[x] = Partial{};
    } else {
      // The nearest placement that works: change w to fit a where a is the activation
      // Megatron expects, else a to fit w.
      std::string fix;
      if (qa != nullptr || qw != nullptr) {
        fix = detail::redistribute_advice("a", pa, detail::reduced_placements(pa), "w", pw,
                                          detail::reduced_placements(pw));
      } else if (sw != nullptr && sw->dim == 0) {  // row-parallel weights: shard a's last dim
        fix = "redistribute(a, " + detail::placements_text(detail::with_axis(pa, x, Shard{last})) +
              ")";
      } else if (sa != nullptr && sa->dim == last) {  // a's last dim cut: cut w's rows too
        fix =
            "redistribute(w, " + detail::placements_text(detail::with_axis(pw, x, Shard{0})) + ")";
      } else {  // a cut along rows and w along columns on one axis: replicate w there
        fix = "redistribute(w, " + detail::placements_text(detail::with_axis(pw, x, Replicate{})) +
              ")";
      }
      detail::fail<PlacementError>(op, "on mesh axis ", x, " a is ", detail::placement_text(pa[x]),
                                   " and w is ", detail::placement_text(pw[x]), " (a ",
                                   detail::placements_text(pa), ", w ", detail::placements_text(pw),
                                   "), which no local product ", "places; call ", fix, " first");
    }
  }
  std::vector<std::int64_t> dims(ga.dims().begin(), ga.dims().end());
  dims[r - 1] = gw.dims()[1];
  std::vector<DeviceArray<T>> shards;
  shards.reserve(static_cast<std::size_t>(a.size()));
  for (std::int64_t i = 0; i < a.size(); ++i)
    shards.push_back(ferry::matmul(a.shard(i), w.shard(i)));
  return detail::placed_like(a, std::move(shards),
                             Shape(std::span<const std::int64_t>(dims.data(), dims.size())),
                             std::move(out));
}

}  // namespace ferry
