#pragma once
// How an optimizer steps mesh-array parameters (a tensor-parallel layer's, or anyone's): each
// shard is a parameter of its own, on its own device, with state of its own beside it, so the
// update every optimizer already has runs unchanged, shard by shard, in place. This file checks
// a step's mesh parameters against their gradients and flattens both into the shards the
// update takes; optim::Optimizer's mesh steps (optim/optimizer.hpp) use it. It is apart from
// the optimizer because it is about the mesh's placements, not about any update rule.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/core/error.hpp"
#include "ferry/mesh/mesh.hpp"
#include "ferry/mesh/mesh_array.hpp"
#include "ferry/mesh/placement.hpp"

namespace ferry::optim::detail {

/// Where a mesh parameter lives: its state's shards are placed alike.
struct MeshLayout {
  Mesh mesh;
  Shape global_shape;
  Placements placements;

  bool operator==(const MeshLayout& o) const {
    return mesh == o.mesh && global_shape == o.global_shape && placements == o.placements;
  }
};

/// A mesh step's parameters and gradients as the shards the update takes: parameter k's shard
/// i at position (sum of the earlier parameters' shard counts) + i.
struct FlatMeshStep {
  std::vector<DeviceArray<float>*> params;
  std::vector<const DeviceArray<float>*> grads;
  std::vector<std::string> labels;  // "mesh parameter 1, shard 3 (device name)"
  std::vector<MeshLayout> layouts;  // one per mesh parameter
};

/// "mesh parameter k": the k-th of a step's mesh parameters, in error messages.
inline std::string mesh_parameter(std::size_t k) { return "mesh parameter " + std::to_string(k); }

/// Checks `params` against `grads` and flattens them. Throws, as `op` (the optimizer's name),
/// InvalidArgument for counts that differ, an empty parameter or gradient, one without a global
/// view, a parameter with a Partial axis (a parameter is one value: Shard or Replicate on each
/// axis), or a gradient on another mesh; ShapeError naming both global shapes; PlacementError
/// naming both placements for a gradient placed otherwise than its parameter.
inline FlatMeshStep flatten_mesh_step(std::string_view op,
                                      std::span<MeshArray<float>* const> params,
                                      std::span<const MeshArray<float>> grads) {
  if (grads.size() != params.size()) {
    ferry::detail::fail<InvalidArgument>(op, params.size(), " mesh parameters but ", grads.size(),
                                         " gradients were given");
  }
  FlatMeshStep out;
  out.layouts.reserve(params.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    const std::string name = mesh_parameter(k);
    if (params[k] == nullptr || !params[k]->valid()) {
      ferry::detail::fail<InvalidArgument>(op, name, " is an empty mesh array");
    }
    MeshArray<float>& p = *params[k];
    const MeshArray<float>& g = grads[k];
    if (!g.valid())
      ferry::detail::fail<InvalidArgument>(op, "the gradient of ", name, " is an empty mesh array");
    if (!p.placed() || !g.placed()) {
      ferry::detail::fail<InvalidArgument>(op, p.placed() ? "the gradient of " : "", name,
                                           " has no global view (placements): the optimizer "
                                           "keeps state placed like its parameter");
    }
    for (std::size_t x = 0; x < p.placements().size(); ++x) {
      if (ferry::detail::is_partial(p.placements()[x])) {
        ferry::detail::fail<InvalidArgument>(
            op, name, " is placed ", ferry::detail::placements_text(p.placements()),
            "; a parameter is Shard or Replicate on each mesh axis, not ",
            ferry::detail::placement_text(p.placements()[x]), " (mesh axis ", x, ")");
      }
    }
    const Mesh mesh = p.mesh();
    const Mesh other = g.mesh();
    if (!(other == mesh)) {
      ferry::detail::fail<InvalidArgument>(op, name, " lives on mesh ", mesh.spec().name, " ",
                                           mesh.shape().to_string(), ", its gradient on mesh ",
                                           other.spec().name, " ", other.shape().to_string());
    }
    if (p.global_shape() != g.global_shape()) {
      ferry::detail::fail<ShapeError>(op, name, " has global shape ", p.global_shape(),
                                      ", its gradient ", g.global_shape());
    }
    if (p.placements() != g.placements()) {
      ferry::detail::fail<PlacementError>(
          op, name, " is placed ", ferry::detail::placements_text(p.placements()),
          ", its gradient ", ferry::detail::placements_text(g.placements()),
          ": redistribute the gradient to its parameter's placements");
    }
    out.layouts.push_back({mesh, p.global_shape(), p.placements()});
    std::vector<DeviceArray<float>>& shards = ferry::detail::MeshArrayShards::of(p);
    for (std::size_t i = 0; i < shards.size(); ++i) {
      out.params.push_back(&shards[i]);
      out.grads.push_back(&g.shards()[i]);
      out.labels.push_back(name + ", shard " + std::to_string(i) + " (" +
                           mesh.devices()[i].name() + ")");
    }
  }
  return out;
}

/// "2 mesh parameters: (6, 10) placed (Shard(1)) on ring (4), ...": a step's layouts, for an
/// error message.
inline std::string layouts_text(std::span<const MeshLayout> layouts) {
  std::string out = std::to_string(layouts.size()) + " mesh parameters";
  for (std::size_t k = 0; k < layouts.size(); ++k) {
    const MeshLayout& l = layouts[k];
    out += (k == 0 ? ": " : ", ") + l.global_shape.to_string() + " placed " +
           ferry::detail::placements_text(l.placements) + " on " + l.mesh.spec().name + " " +
           l.mesh.shape().to_string();
  }
  return out;
}

}  // namespace ferry::optim::detail
