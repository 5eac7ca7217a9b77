#pragma once
// What the ops on placed mesh arrays (mesh/mesh_ops.hpp) share: the checks of their operands
// (a global view, one mesh) and the making of a placed result from per-device shards.

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
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"

namespace ferry {

namespace detail {

/// Throws InvalidArgument, as `op`, for an empty handle or an array without a global view.
template <Element T>
void check_placed(std::string_view op, const MeshArray<T>& a, std::string_view what) {
  if (!a.valid()) fail<InvalidArgument>(op, what, " is an empty mesh array");
  if (!a.placed()) {
    fail<InvalidArgument>(op, what,
                          " has no global view (a collective's result, or from_shards without "
                          "placements): give it placements with MeshArray::from_shards(mesh, "
                          "shards, global_shape, placements)");
  }
}

/// Throws InvalidArgument, as `op`, when `a` and `b` live on two meshes.
template <Element T>
void check_same_mesh(std::string_view op, const MeshArray<T>& a, const MeshArray<T>& b) {
  const Mesh ma = a.mesh();
  const Mesh mb = b.mesh();
  if (MeshAccess::handle(ma) != MeshAccess::handle(mb)) {
    fail<InvalidArgument>(op, "the operands live on two meshes: ", ma.spec().name, " ",
                          ma.shape().to_string(), " and ", mb.spec().name, " ",
                          mb.shape().to_string(), "; an op takes arrays of one mesh");
  }
}

/// `ps` with every Partial made Replicate: what an all-reduce (redistribute) gives.
inline Placements reduced_placements(Placements ps) {
  for (auto& p : ps) {
    if (std::holds_alternative<Partial>(p)) p = Replicate{};
  }
  return ps;
}

/// The advice of a refusal: "redistribute(a, <want_a>) and redistribute(b, <want_b>)", naming
/// only the operands whose placements would change (a Replicate operand beside a Partial one
/// is already where it must be).
inline std::string redistribute_advice(std::string_view a_name, const Placements& pa,
                                       const Placements& want_a, std::string_view b_name,
                                       const Placements& pb, const Placements& want_b) {
  const auto one = [](std::string_view name, const Placements& want) {
    return "redistribute(" + std::string(name) + ", " + placements_text(want) + ")";
  };
  if (pa == want_a) return one(b_name, want_b);
  if (pb == want_b) return one(a_name, want_a);
  return one(a_name, want_a) + " and " + one(b_name, want_b);
}

/// `ps` with axis `x` set to `p`.
inline Placements with_axis(Placements ps, std::size_t x, ferry::Placement p) {
  ps[x] = p;
  return ps;
}

/// A mesh array of `shards` on `a`'s mesh, of shape `global`, placed by `ps`.
template <Element T>
MeshArray<T> placed_like(const MeshArray<T>& a, std::vector<DeviceArray<T>> shards,
                         const Shape& global, Placements ps) {
  return MeshArray<T>::from_shards(a.mesh(), std::move(shards), global, std::move(ps));
}

/// `f` of every shard of `a`.
template <Element T, class F>
std::vector<DeviceArray<T>> each_shard(const MeshArray<T>& a, F&& f) {
  std::vector<DeviceArray<T>> out;
  out.reserve(static_cast<std::size_t>(a.size()));
  for (const DeviceArray<T>& s : a.shards()) out.push_back(f(s));
  return out;
}

}  // namespace detail

}  // namespace ferry
