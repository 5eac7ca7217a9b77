#pragma once
// Where gradients meet the mesh: what ferry::value_and_grad, grad and vjp (autodiff/grad.hpp)
// and nn::value_and_grad over mesh parameters (nn/mesh_grad.hpp) share. A placed mesh array is
// a variable, one per shard; its gradient is placed as it is, and along a Replicate axis its
// copies are one value, so their gradients add (Replicate transposes into Partial(sum)) and an
// all-reduce along that axis gives every copy the whole. A value that is a placed mesh array is
// seeded on every shard: along a Partial axis each shard is a summand, whose cotangent is the
// whole value's (1/n of it for a mean); along a Replicate axis each shard is a copy, seeded with
// a copy that the backward pass counts once (autodiff/backward.hpp's CopyWalk). The functions
// are declared in autodiff/ (which comes before the mesh) and defined here.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/autodiff/arguments.hpp"
#include "ferry/autodiff/grad.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/mesh_groups.hpp"
#include "ferry/mesh/placement.hpp"
#include "ferry/mesh/redistribute.hpp"
#include "ferry/ops/creation.hpp"

namespace ferry::detail {

template <Floating T>
void check_mesh_variable(std::string_view op, std::string_view what, std::size_t position,
                         const MeshArray<T>& a) {
  if (!a.valid()) fail<InvalidArgument>(op, what, " ", position, " is empty");
  if (!a.placed()) {
    fail<InvalidArgument>(op, what, " ", position,
                          " has no global view (placements); give it some with "
                          "MeshArray::from_shards or distribute");
  }
  for (std::size_t x = 0; x < a.placements().size(); ++x) {
    if (is_partial(a.placements()[x])) {
      fail<InvalidArgument>(op, what, " ", position, " is placed ",
                            placements_text(a.placements()), "; ",
                            what.starts_with('a') ? "an " : "a ", what,
                            " is Shard or Replicate on each mesh axis, not ",
                            placement_text(a.placements()[x]), " (mesh axis ", x, ")");
    }
  }
}

template <Floating T>
MeshArray<T> mesh_gradient(const MeshArray<T>& a, std::span<Step* const> vars,
                           std::span<Handle> grads) {
  std::vector<DeviceArray<T>> shards;
  shards.reserve(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i)
    shards.push_back(gradient_for<T>(*vars[i], std::move(grads[i])));
  Placements summed = a.placements();
  bool replicated = false;
  for (ferry::Placement& pl : summed) {
    if (std::holds_alternative<Replicate>(pl)) {
      pl = Partial{};
      replicated = true;
    }
  }
  MeshArray<T> g = MeshArray<T>::from_shards(a.mesh(), std::move(shards), a.global_shape(),
                                             std::move(summed));
  return replicated ? ferry::redistribute(g, a.placements()) : g;
}

/// Checks vjp's mesh cotangent `c` against the function's value `value` (placed): the same
/// mesh, global shape and placements. `index` is their position in a std::tuple the function
/// returns (-1: its only value), named in errors.
template <Floating T>
void check_mesh_cotangent(std::string_view op, const MeshArray<T>& c, const MeshArray<T>& value,
                          std::ptrdiff_t index = -1) {
  const bool many = index >= 0;
  const std::string n = std::to_string(index);
  const std::string cot = many ? "cotangent " + n : "the cotangent";
  const std::string out = many ? "output " + n : "the function's value";
  if (!c.valid()) fail<InvalidArgument>(op, cot, " is an empty mesh array");
  if (!(c.mesh() == value.mesh())) {
    fail<InvalidArgument>(op, cot, " lives on mesh ", c.mesh().spec().name, " ",
                          c.mesh().shape(), ", ", out, " on mesh ", value.mesh().spec().name,
                          " ", value.mesh().shape());
  }
  if (!c.placed()) {
    fail<InvalidArgument>(op, cot, " has no global view (placements); give it ",
                          many ? out + "'s" : "the function's value's", ", ",
                          placements_text(value.placements()),
                          ", with MeshArray::from_shards or distribute");
  }
  if (c.global_shape() != value.global_shape()) {
    fail<ShapeError>(op, cot, " has global shape ", c.global_shape(), ", ", out, " ",
                     value.global_shape());
  }
  if (c.placements() != value.placements()) {
    fail<InvalidArgument>(op, cot, " is placed ", placements_text(c.placements()), ", ", out,
                          " ", placements_text(value.placements()), ": redistribute the ",
                          "cotangent to the ", many ? "output" : "value", "'s placements");
  }
}

/// `first(s, a)` of CopySeeds for `mesh`: whether step s's device stands at position 0 of its
/// group along axis a (true for a device outside the mesh).
inline std::function<bool(const Step&, int)> first_of_groups(const Mesh& mesh,
                                                             std::string_view op) {
  // first[a][d]: whether device d stands at position 0 of its group along axis a.
  std::vector<std::vector<bool>> first;
  for (std::size_t a = 0; a < mesh.shape().rank(); ++a) {
    std::vector<bool> f(static_cast<std::size_t>(mesh.size()), false);
    for (const MeshGroup& g : MeshAccess::handle(mesh)->groups_of(static_cast<int>(a), op))
      f[static_cast<std::size_t>(g.members[0])] = true;
    first.push_back(std::move(f));
  }
  std::vector<const void*> states;
  for (const Device& d : mesh.devices()) states.push_back(DeviceAccess::state(d).get());
  return [first = std::move(first), states = std::move(states)](const Step& s, int a) {
    for (std::size_t d = 0; d < states.size(); ++d) {
      if (states[d] == s.device().get()) return bool(first[static_cast<std::size_t>(a)][d]);
    }
    return true;
  };
}

template <Floating T>
MeshSeeds mesh_seeds(std::string_view op, const MeshArray<T>& value,
                     const MeshArray<T>* cotangent, std::ptrdiff_t index) {
  const bool loss = cotangent == nullptr;
  const std::string what = index >= 0 ? "output " + std::to_string(index)
                           : loss     ? "the loss"
                                      : "the function's value";
  if (!value.valid() || !value.placed() || (loss && value.global_shape().rank() != 0)) {
    fail<InvalidArgument>(op, what, " is a mesh array ",
                          value.valid() && value.placed()
                              ? "of global shape " + value.global_shape().to_string()
                              : std::string("without a global view"),
                          loss ? "; it must be a placed scalar (global shape ())"
                               : "; give it placements (MeshArray::from_shards or redistribute)");
  }
  const Mesh mesh = value.mesh();
  double scale = 1.0;
  MeshSeeds s;
  s.copies.mesh = MeshAccess::handle(mesh).get();
  Placements summed = value.placements();  // the cotangent's, its Partial axes all-reduced
  bool partial_axes = false;
  for (std::size_t x = 0; x < value.placements().size(); ++x) {
    const ferry::Placement& pl = value.placements()[x];
    const auto* partial = std::get_if<Partial>(&pl);
    if (std::holds_alternative<Replicate>(pl)) {
      s.copies.axes.push_back(static_cast<int>(x));
    } else if (partial != nullptr && (partial->op == ReduceOp::sum ||
                                      partial->op == ReduceOp::mean)) {
      if (partial->op == ReduceOp::mean) scale /= static_cast<double>(mesh.shape().sizes()[x]);
      summed[x] = Replicate{};
      partial_axes = true;
    } else if (partial != nullptr) {
      fail<InvalidArgument>(op, what, " is placed ", placements_text(value.placements()), "; ",
                            loss ? "a loss is Replicate, " : "a value is Shard, Replicate, ",
                            "Partial(sum) or Partial(mean) on each mesh axis, not ",
                            placement_text(pl), " (mesh axis ", x, ")");
    }
  }
  MeshArray<T> c;
  if (!loss) {
    check_mesh_cotangent(op, *cotangent, value, index);
    // Along a Partial axis every summand's cotangent is the whole cotangent's value.
    c = partial_axes ? ferry::redistribute(*cotangent, summed) : *cotangent;
  }
  s.copies.first = first_of_groups(mesh, op);
  for (std::size_t i = 0; i < value.shards().size(); ++i) {
    const DeviceArray<T>& v = value.shards()[i];
    s.outs.push_back(&step_of(op, v));
    const DeviceArray<T> seed =
        loss ? ferry::ones<T>(v.device(), Shape{}) : c.shard(static_cast<std::int64_t>(i));
    s.seeds.push_back(handle_of(scale == 1.0 ? seed : seed * scale));
  }
  // The backward pass sums cotangents of T with what set_grad taught it: a seed may meet
  // another cotangent before any rule has made one (a value that is a collective's result).
  cotangent_sum(dtype_of<T>).store(&add_cotangents_as<T>, std::memory_order_relaxed);
  return s;
}

}  // namespace ferry::detail
